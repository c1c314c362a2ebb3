"""The job's Stop reaches every rank even when one has ended already: a TP replica's follower acts
on the Stop its leader forwards, so it can end between the controller's send to the leader and
its own (a full-suite run saw the 4-rank TP=2 job fail at its very end: rank 3's connection
closed, RankGone raised from the Stop)."""

from __future__ import annotations

from types import SimpleNamespace

from pivot.runtime.control import messages as m
from pivot.runtime.control.control_plane import RankGone
from pivot.runtime.control.outbox import Outbox


class FollowerEnded:
    """An endpoint whose rank 3 has closed its connection, as ControllerEndpoint.send says it."""

    def __init__(self) -> None:
        self.sent: list[int] = []

    def send(self, rank: int, msg: m.ToWorker) -> None:
        if rank == 3:
            raise RankGone("rank 3 at 127.0.0.1 stopped answering")
        self.sent.append(rank)


def test_a_rank_that_ended_on_its_leaders_stop_is_not_a_failure() -> None:
    endpoint = FollowerEnded()
    outbox = Outbox(endpoint, SimpleNamespace(world=5))  # type: ignore[arg-type]
    outbox.stop_all(m.Stop("done"))
    assert endpoint.sent == [0, 1, 2, 4]  # every other rank still told
