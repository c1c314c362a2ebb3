"""UpstreamFirstPlanner: a queued rollout makes rollout the shift-up role (Figure 8 otherwise
gives it to the reward bottleneck)."""

from __future__ import annotations

import dataclasses

from pivot.config import PlannerConfig
from pivot.plan import PivotPlanner, Role
from pivot.plan.upstream_first import UpstreamFirstPlanner
from pivot.sched import SeqState
from tests.plan.fig8 import figure8


def _up_role(planner: PivotPlanner, snap) -> Role | None:  # noqa: ANN001
    scheds = {r: snap.scheduler(r) for r in ("rollout", "reward")}
    return planner.up_role(snap, scheds, False)


def test_a_waiting_rollout_takes_the_shift_up() -> None:
    snap = figure8()
    waiting = dataclasses.replace(snap, queues={**snap.queues, "rollout": (SeqState(10_000, 150),)})
    cfg = PlannerConfig()
    assert _up_role(PivotPlanner(cfg), waiting) == Role.REWARD  # N / T: the reward bottleneck
    assert _up_role(UpstreamFirstPlanner(cfg), waiting) == Role.ROLLOUT
    assert _up_role(UpstreamFirstPlanner(cfg), snap) == Role.REWARD  # nothing waits: as before
    ready = dataclasses.replace(waiting, train_batch_ready=True, active=waiting.active - {200})
    assert _up_role(UpstreamFirstPlanner(cfg), ready) == Role.TRAIN  # training is never delayed
