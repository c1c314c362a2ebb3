"""Upstream first: a rollout waiting in the queue makes rollout the role that gains devices.

Every sample is a chain, rollout then judge, and a step trains when its longest chain is done.
The planner's step 1 (`choose_up_role`) gives devices to the role with the larger N / T, which
after a step's release is nearly always the GenRM (thousands of judges queued): the release's
rollouts then share few rollout replicas, and a judge that will run for minutes starts only
when its rollout is done. `UpstreamFirstPlanner` asks for rollout devices whenever rollouts wait
for a replica (queued, not running), since each of them delays the start of its chain; the
benefit test (step 5) still decides whether a shift pays.
"""

from __future__ import annotations

from pivot.plan.planner import PivotPlanner
from pivot.plan.snapshot import ClusterSnapshot
from pivot.sched.records import Role
from pivot.sched.scheduler import ShiftAwareScheduler


class UpstreamFirstPlanner(PivotPlanner):
    def up_role(
        self, snap: ClusterSnapshot, scheds: dict[str, ShiftAwareScheduler], binary: bool
    ) -> Role | None:
        role = super().up_role(snap, scheds, binary)
        if role == Role.REWARD and snap.queues.get(Role.ROLLOUT):
            return Role.ROLLOUT
        return role
