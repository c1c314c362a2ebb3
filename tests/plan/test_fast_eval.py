"""The planner's optimised evaluation returns exactly the straightforward evaluation's numbers:
per candidate, clone the paper oracle (tests/sched/reference_scheduler.py), shift down, shift
up, read the rates."""

from __future__ import annotations

import random

import pytest

from pivot.config import PlannerConfig
from pivot.plan import ClusterSnapshot, PivotPlanner
from pivot.plan.snapshot import ClusterSnapshot as _Snap
from pivot.sched import Replica, SeqState, ThroughputModel
from tests.plan.fig8 import figure8
from tests.sched import reference_scheduler as ref
from tools.bench_planner import clone_benefits, scenario

RO = [
    ThroughputModel(A=1e-6, B=0.010, C=2e-4, D=0.005),
    ThroughputModel(A=3e-6, B=0.004, C=1e-4, D=0.002),
]
RM = [
    ThroughputModel(A=2e-6, B=0.020, C=4e-4, D=0.010),
    ThroughputModel(A=0.0, B=0.02, C=0.0, D=0.0),
]


def random_snapshot(seed: int) -> ClusterSnapshot:
    """n devices: 1-device rollout slots, 4-device reward slots (mixed models and capacities),
    a training pool on the last quarter; random up sets, running sequences and queues."""
    rng = random.Random(seed)
    n = 4 * rng.randint(2, 8)
    slots = [
        Replica(i, "rollout", (i,), rng.choice([3000, 8000]), rng.choice(RO)) for i in range(n)
    ]
    slots += [
        Replica(
            n + i,
            "reward",
            tuple(range(4 * i, 4 * i + 4)),
            rng.choice([6000, 20000]),
            rng.choice(RM),
        )
        for i in range(n // 4)
    ]
    train = 2 * n
    slots.append(Replica(train, "train", tuple(range(3 * n // 4, n))))
    held: set[int] = set()
    active: set[int] = set()
    order = list(range(n, n + n // 4)) + list(range(n))
    rng.shuffle(order)
    if rng.random() < 0.5:
        active.add(train)
        held |= set(range(3 * n // 4, n))
    for rid in order:
        devs = set(slots[rid].devices)
        if not devs & held and rng.random() < 0.6:
            active.add(rid)
            held |= devs
    running, sid = {}, 0
    for rid in sorted(active - {train}):
        k = rng.randint(0, 6)
        running[rid] = tuple(
            SeqState(sid + j, rng.randint(50, 600), rng.randint(0, 300)) for j in range(k)
        )
        sid += k
    queues = {}
    for role in ("rollout", "reward"):
        queues[role] = tuple(
            SeqState(sid + j, rng.randint(50, 900), rng.randint(0, 300))
            for j in range(rng.randint(0, 60))
        )
        sid += len(queues[role])
    return _Snap(
        tuple(slots),
        frozenset(active),
        running,
        queues,
        train_batch_ready=rng.random() < 0.2,
        train_throughput=rng.choice([0.0, 500.0]),
    )


def ref_scheduler(snap: ClusterSnapshot, role: str, migrate: bool) -> ref.ShiftAwareScheduler:
    slots = snap.slots(role)
    s = ref.ShiftAwareScheduler(
        slots, active=[r.replica_id for r in slots if r.replica_id in snap.active], migrate=migrate
    )
    for r in slots:
        for seq in snap.running.get(r.replica_id, ()):
            s.adopt(seq, r.replica_id)
    for seq in snap.queues.get(role, ()):
        s.submit(seq)
    return s


def reference_benefits(snap: ClusterSnapshot, cfg: PlannerConfig, cands: list) -> list[float]:
    """Per candidate: clone each role's paper oracle, shift down, shift up, rate."""
    return clone_benefits(snap, cfg, cands, ref_scheduler)


@pytest.mark.parametrize("seed", range(60))
@pytest.mark.parametrize("ablation", ["", "migration", "throughput_model"])
def test_optimised_evaluation_equals_reference(seed: int, ablation: str) -> None:
    snap = figure8() if seed == 0 else random_snapshot(seed)
    cfg = PlannerConfig(**({ablation: False} if ablation else {}))
    planner = PivotPlanner(cfg)
    planner.plan(snap)
    cands = [c for c, _ in planner.last_candidates]
    assert [b for _, b in planner.last_candidates] == reference_benefits(snap, cfg, cands)


@pytest.mark.parametrize("seed", range(1, 20))
def test_bulk_loaded_scheduler_equals_one_by_one(seed: int) -> None:
    snap = random_snapshot(seed)
    for role in ("rollout", "reward"):
        fast, slow = snap.scheduler(role), ref_scheduler(snap, role, True)
        assert [q.seq_id for q in fast.queued()] == [q.seq_id for q in slow.queued()]
        for rid in slow.replica_ids:
            assert [q.seq_id for q in fast.running(rid)] == [q.seq_id for q in slow.running(rid)]
            assert fast.replica_throughput(rid) == slow.replica_throughput(rid)
        fast.submit(SeqState(10**6, 10))
        slow.submit(SeqState(10**6, 10))
        assert fast.dispatch() == slow.dispatch()


@pytest.mark.parametrize("seed", range(1, 31))
def test_numpy_dispatch_path_equals_reference(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The what-if runs take the numpy arg-max from 1 target on: same benefits as the reference."""
    import pivot.sched.trial as trial

    monkeypatch.setattr(trial, "_VECTOR_MIN", 1)
    snap = random_snapshot(seed)
    planner = PivotPlanner(PlannerConfig(max_evaluated=10**6))
    planner.plan(snap)
    cands = [c for c, _ in planner.last_candidates]
    assert [b for _, b in planner.last_candidates] == reference_benefits(snap, planner.cfg, cands)


@pytest.mark.slow
def test_bench_scale_plan_equals_reference() -> None:
    """256 devices of the planner benchmark (numpy dispatch without patching, thousands of
    queued sequences): every evaluated benefit equals the paper oracle's."""
    snap = scenario(256)
    planner = PivotPlanner(PlannerConfig(max_evaluated=8, budget_s=0.0))  # 8: the test's length
    planner.plan(snap)
    cands = [c for c, _ in planner.last_candidates]
    assert len(cands) == 8
    assert [b for _, b in planner.last_candidates] == reference_benefits(snap, planner.cfg, cands)
