"""The shift the executor runs is the one the planner scored (issue 47, item 4).

The planner's step 4 scores a candidate with `ShiftAwareScheduler.what_if().run(down, up)`:
Algorithm 3 over the whole leaving set, then Algorithm 4 over the joining set. The executor,
given that plan, must reach the same placement through the host's scheduler calls, and must
never dispatch a sequence onto a replica that leaves in the same plan (it would be aborted
again at once). Random six-replica states of one role on the 16-device cluster of
tests/shift/conftest.py (rollout TP2: slots 0-7), with a few down replicas to shift up.
"""

from __future__ import annotations

import random

import pytest

from pivot.plan.planner import PlanTimings, ShiftPlan
from pivot.sched import Dispatch, SeqState, ShiftAwareScheduler
from pivot.sched.records import Command
from pivot.shift import ShiftExecutor
from tests.shift.conftest import table


class SchedulerHost:
    """A `ShiftHost` that applies the scheduler's Algorithms 3 and 4 and keeps their commands."""

    def __init__(self, sched: ShiftAwareScheduler) -> None:
        self.sched = sched
        self.off: list[Command] = []

    def migrate_off(self, role: str, rids: list[int]) -> None:
        self.off += self.sched.shift_down(rids)

    def release(self, rid: int) -> None:
        pass

    def acquire(self, rid: int) -> None:
        pass

    def migrate_on(self, role: str, rids: list[int]) -> None:
        if rids:
            self.sched.shift_up(rids)


def placement(sched: ShiftAwareScheduler) -> dict[int, int | None]:
    """Sequence id -> replica id (None: queued)."""
    out: dict[int, int | None] = {s.seq_id: None for s in sched.queued()}
    for rid in sched.active_ids:
        out.update((s.seq_id, rid) for s in sched.running(rid))
    return out


def random_state(rng: random.Random) -> tuple[ShiftAwareScheduler, list[int]]:
    """Six rollout replicas up (of slots 0-7), random running sequences and a queue."""
    slots = table(world=16, per_host=8, tp=(2, 4), train=0).slots("rollout")
    up = sorted(rng.sample(range(len(slots)), 6))
    sched = ShiftAwareScheduler(slots, active=up)
    sid, running = 0, {}
    for rid in up:
        n = rng.randint(0, 8)
        running[rid] = [SeqState(sid + j, rng.randint(1, 12), rng.randint(0, 10)) for j in range(n)]
        sid += n
    queue = [
        SeqState(sid + j, rng.randint(1, 15), rng.randint(0, 5)) for j in range(rng.randint(0, 6))
    ]
    sched.load_state(running, queue)
    return sched, up


def planned(
    sched: ShiftAwareScheduler, down: list[int], up: list[int]
) -> tuple[dict[int, tuple[int, int]], float, dict[int, int | None]]:
    """What the planner scored: the what-if run's per-replica loads (sequences, tokens) of the
    replicas up after it and its throughput; and the placement of the same shifts applied at
    once to a clone (the what-if's decisions, bit for bit: tests/sched/test_trial.py; the run
    itself keeps loads, not a placement)."""
    trial = sched.what_if().run(down, up)
    ids = trial.b.ids
    n, tok = trial.loads.n, trial.loads.tok
    loads = {ids[i]: (n[i], tok[i]) for i, a in enumerate(trial.active) if a}
    clone = sched.clone()
    clone.shift_down(down)
    if up:
        clone.shift_up(up)
    return loads, trial.throughput(), placement(clone)


@pytest.mark.parametrize("seed", range(40))
def test_executed_placement_is_the_what_ifs(seed: int) -> None:
    rng = random.Random(seed)
    sched, up_now = random_state(rng)
    down = sorted(rng.sample(up_now, rng.randint(2, 4)))
    idle = [r for r in sched.replica_ids if r not in up_now]
    up = sorted(rng.sample(idle, rng.randint(0, len(idle))))
    loads, throughput, want = planned(sched, down, up)

    host = SchedulerHost(sched)
    ex = ShiftExecutor(table(world=16, per_host=8, tp=(2, 4), train=0), host)
    for rid in up_now:  # the replica states only: the scheduler already holds its state
        ex.states.start(rid, up=True)
        ex.states.finish(rid)
    ex.execute(ShiftPlan("rollout", tuple(up), tuple(down), 0.0, 0.0, PlanTimings()))
    ex.complete([*down, *up])

    leaving = [c for c in host.off if isinstance(c, Dispatch) and c.replica_id in down]
    assert leaving == [], f"dispatched onto replicas leaving in the same plan: {leaving}"
    assert {rid: sched.load(rid) for rid in sched.active_ids} == loads
    assert sched.throughput() == throughput
    assert placement(sched) == want
