"""`Outbox`: the controller's messages to the workers, addressed by replica: to every rank of a
replica's slot, to its leader only (an inference leader forwards slot-wide messages to its
followers, lockstep), or to every rank of the job. The slot's ranks are the cluster's table's
now (a re-size moves the training slot's)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pivot.runtime.control import messages as m
from pivot.runtime.control.control_plane import RankGone

if TYPE_CHECKING:  # annotations only
    from pivot.runtime.control.control_plane import ControllerEndpoint
    from pivot.shift import Cluster


class Outbox:
    def __init__(self, endpoint: ControllerEndpoint, cluster: Cluster) -> None:
        self.endpoint, self.cluster = endpoint, cluster

    def to_slot(self, rid: int, msg: m.ToWorker, leader_only: bool = False) -> None:
        """`msg` to the ranks of replica `rid` (`leader_only`: its first rank)."""
        ranks = self.cluster.table.replicas[rid].devices
        for rank in ranks[:1] if leader_only else ranks:
            self.endpoint.send(rank, msg)

    def to_all(self, msg: m.ToWorker) -> None:
        """`msg` to every rank of the job."""
        for rank in range(self.cluster.world):
            self.endpoint.send(rank, msg)

    def stop_all(self, msg: m.Stop) -> None:
        """The Stop to every rank. A rank whose connection has closed already is not a failure:
        a replica's follower acts on the Stop its leader forwards (its own copy is dropped), so it
        can end between the controller's send to the leader and its own."""
        for rank in range(self.cluster.world):
            try:
                self.endpoint.send(rank, msg)
            except RankGone:
                continue
