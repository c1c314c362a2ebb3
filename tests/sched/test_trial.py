"""The planner's what-if runs (pivot/sched/trial.py) equal shift_down + shift_up on a clone of
the paper oracle (reference_scheduler.py): same throughput (bit for bit) and same busy
replicas, on the scalar and on the numpy arg-max path."""

from __future__ import annotations

import random

import pytest

import pivot.sched.trial as trial
from pivot.sched import Replica, SeqState, ShiftAwareScheduler, ThroughputModel
from pivot.sched.dispatch import TargetArrays
from tests.sched import reference_scheduler as ref

MODELS = [
    ThroughputModel(A=2e-6, B=0.012, C=1.5e-4, D=0.004),
    ThroughputModel(A=1e-6, B=0.010, C=2e-4, D=0.005),
    ThroughputModel(A=0.0, B=0.02, C=0.0, D=0.0),  # dT independent of load: many exact ties
]


def random_pair(
    rng: random.Random, n: int, mixed: bool
) -> tuple[ShiftAwareScheduler, ref.ShiftAwareScheduler]:
    """The same random state in both schedulers, reached by a series of operations (so the
    queue holds stale entries and replicas hold moved sequences)."""
    model = rng.choice(MODELS)
    specs = [
        Replica(
            i, "rollout", (i,), rng.choice([500, 800, 3000]), rng.choice(MODELS) if mixed else model
        )
        for i in range(n)
    ]
    active = [i for i in range(n) if rng.random() < 0.5] or [0]
    fast = ShiftAwareScheduler(specs, active=active, migrate=rng.random() < 0.85)
    slow = ref.ShiftAwareScheduler(specs, active=active, migrate=fast.migrate)
    sid = 0
    for _ in range(rng.randint(5, 4 * n + 20)):
        op = rng.choice(["submit", "submit", "submit", "dispatch", "abort", "progress", "finish"])
        if op == "submit":
            seq = SeqState(sid, rng.randint(1, 400), rng.randint(0, 50))
            sid += 1
            fast.submit(seq)
            slow.submit(seq)
            continue
        if op == "dispatch":
            fast.dispatch()
            slow.dispatch()
            continue
        known = sorted(q.seq_id for q in slow.queued()) + sorted(
            q.seq_id for r in slow.replica_ids for q in slow.running(r)
        )
        if not known:
            continue
        s = rng.choice(known)
        if op == "abort":
            fast.abort(s)
            slow.abort(s)
        elif op == "progress":
            g = rng.randint(0, 300)
            fast.on_progress(s, g)
            slow.on_progress(s, g)
        else:
            fast.on_finish(s)
            slow.on_finish(s)
    return fast, slow


def check(
    fast: ShiftAwareScheduler, slow: ref.ShiftAwareScheduler, rng: random.Random, rounds: int
) -> None:
    base = fast.what_if()
    for _ in range(rounds):
        act = slow.active_ids
        off = [r for r in slow.replica_ids if r not in act]
        down = rng.sample(act, rng.randint(0, len(act) - 1)) if len(act) > 1 else []
        up = rng.sample(off, rng.randint(0, len(off))) if off else []
        if rng.random() < 0.3:  # shifted down now, up again in the same candidate is not allowed
            down = []
        sim = slow.clone()
        if down:
            sim.shift_down(down)
        if up:
            sim.shift_up(up)
        got = base.run(down, up)
        assert got.throughput() == sim.throughput(), (down, up)
        assert got.busy() == sum(1 for r in sim.active_ids if sim.load(r)[0] > 0)
        assert got.loads.n == [sim.load(r)[0] for r in sim.replica_ids]


@pytest.mark.parametrize("sort_after", [trial._SORT_AFTER, 0])
@pytest.mark.parametrize("vector_min", [1, 10**9])
@pytest.mark.parametrize("seed", range(30))
def test_trial_equals_reference_shifts(
    seed: int, vector_min: int, sort_after: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sort_after=0: every dispatch of 2+ sequences takes them from a sorted queue."""
    monkeypatch.setattr(trial, "_VECTOR_MIN", vector_min)
    if sort_after == 0:
        monkeypatch.setattr(trial, "_SORT_AFTER", 0)
        monkeypatch.setattr(trial, "_SORT_MIN", 2)
    rng = random.Random(seed)
    fast, slow = random_pair(rng, rng.randint(1, 9), mixed=rng.random() < 0.5)
    check(fast, slow, rng, 6)


@pytest.mark.parametrize("seed", range(4))
def test_trial_equals_reference_many_replicas(seed: int) -> None:
    """Enough replicas for the numpy path without patching, one model (the scalar-A form)."""
    rng = random.Random(100 + seed)
    fast, slow = random_pair(rng, 60, mixed=seed % 2 == 1)
    check(fast, slow, rng, 4)


@pytest.mark.parametrize("slack", [1.0, float("inf")])
@pytest.mark.parametrize("seed", range(12))
def test_trial_drained_equals_reference(
    seed: int, slack: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Queues dispatched first (the state the runtime plans on), so migration steps take the
    fused abort + arg-max path; slack=inf makes every keep/stop decision use the ordered sums
    (the estimate with its error bound must decide the same)."""
    monkeypatch.setattr(trial, "_SLACK", slack)
    monkeypatch.setattr(trial, "_VECTOR_MIN", 1 if seed % 2 else trial._VECTOR_MIN)
    fused = 0
    make = trial.Trial._fused

    def counted(self: trial.Trial, arr: TargetArrays):  # noqa: ANN202
        nonlocal fused
        fused += 1
        return make(self, arr)

    monkeypatch.setattr(trial.Trial, "_fused", counted)
    rng = random.Random(300 + seed)
    fast, slow = random_pair(rng, rng.choice([8, 45, 70]), mixed=False)
    fast.dispatch()
    slow.dispatch()
    check(fast, slow, rng, 5)
    if seed % 2:
        assert fused > 0 or not fast.migrate
