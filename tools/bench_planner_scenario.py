"""tools/bench_planner.py's scenario (paper Table 2's layout at N devices, reward the bottleneck)
and the straightforward evaluation its planner's step 4 is checked against (`clone_benefits`,
also run by tests/plan/test_fast_eval.py with the paper oracle), with step 5 on its benefits."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from pivot.config import PlannerConfig
from pivot.plan import ClusterSnapshot, benefit, overall_throughput
from pivot.plan.candidates import Candidate
from pivot.sched import Replica, SeqState, ShiftAwareScheduler, ThroughputModel

RO = ThroughputModel(A=1e-6, B=0.010, C=2e-4, D=0.005)
RM = ThroughputModel(A=2e-6, B=0.020, C=4e-4, D=0.010)
_RO, _RM, _Replica, _SeqState, _Snapshot = RO, RM, Replica, SeqState, ClusterSnapshot


def scenario(n: int, seed: int = 0, api: Any = None) -> ClusterSnapshot:
    """`api`: where Replica, SeqState, ThroughputModel and ClusterSnapshot come from (default:
    this checkout's pivot; --against passes the older version's)."""
    Replica, SeqState, ClusterSnapshot = (
        (api.Replica, api.SeqState, api.ClusterSnapshot)
        if api
        else (_Replica, _SeqState, _Snapshot)
    )
    RO, RM = (api.ThroughputModel(m.A, m.B, m.C, m.D) for m in (_RO, _RM)) if api else (_RO, _RM)
    rng = random.Random(seed)
    slots = [Replica(i, "rollout", (i,), 400_000, RO) for i in range(n)]
    slots += [
        Replica(n + i, "reward", tuple(range(4 * i, 4 * i + 4)), 200_000, RM) for i in range(n // 4)
    ]
    slots.append(Replica(2 * n, "train", tuple(range(3 * n // 4, n))))
    active = {2 * n, *(n + i for i in range(n // 16)), *range(n // 4, 3 * n // 4)}
    running, sid = {}, 0
    for rid in sorted(active - {2 * n}):
        k = rng.randint(20, 60) if rid >= n else rng.randint(2, 12)
        running[rid] = tuple(
            SeqState(sid + j, rng.randint(200, 1500), rng.randint(0, 1500)) for j in range(k)
        )
        sid += k
    queue = tuple(
        SeqState(sid + j, rng.randint(500, 2000), rng.randint(100, 1000))
        for j in range(max(2000, 4 * n))
    )
    return ClusterSnapshot(tuple(slots), frozenset(active), running, {"reward": queue})


def drained(snap: Any) -> Any:
    """The same cluster after each role's scheduler dispatched its queue (a live scheduler's
    state: sequences wait only when no up replica can hold them)."""
    running, queues = {}, {}
    for role in ("rollout", "reward"):
        s = snap.scheduler(role)
        s.dispatch()
        running.update({rid: tuple(s.running(rid)) for rid in s.active_ids})
        queues[role] = tuple(s.queued())
    return type(snap)(snap.replicas, snap.active, running, queues)


def production_scheduler(snap: ClusterSnapshot, role: str, migrate: bool) -> ShiftAwareScheduler:
    return snap.scheduler(role, migrate=migrate)


def clone_benefits(
    snap: ClusterSnapshot,
    cfg: PlannerConfig,
    cands: list[Candidate],
    scheduler: Callable[..., Any] = production_scheduler,
) -> list[float]:
    """Step 4 the straightforward way: per candidate, clone each role's `scheduler(snap, role,
    migrate)`, shift down, shift up and read its rate (busy replicas without the throughput model)."""

    def rate(s: Any) -> float:
        return (
            float(sum(1 for rid in s.active_ids if s.load(rid)[0] > 0))
            if not cfg.throughput_model
            else s.throughput()
        )

    base = {r: scheduler(snap, r, cfg.migration) for r in ("rollout", "reward")}
    role_of = {r.replica_id: r.role for r in snap.replicas}
    n = {r: base[r].num_sequences() for r in base}
    cur = overall_throughput(n["rollout"], rate(base["rollout"]), n["reward"], rate(base["reward"]))
    out = []
    for c in cands:
        rates = {}
        for role, s in base.items():
            sim = s.clone()
            down = sorted(r for r in c.down if role_of[r] == role)
            up = sorted(r for r in c.up if role_of[r] == role)
            if down:
                sim.shift_down(down)
            if up:
                sim.shift_up(up)
            rates[role] = rate(sim)
        t = overall_throughput(n["rollout"], rates["rollout"], n["reward"], rates["reward"])
        out.append(benefit(cfg.horizon_s, t, cur, c.penalty))
    return out


def best_of(cands: list, benefits: list[float]) -> tuple | None:
    """The planner's step 5 on (candidate, benefit) in ascending k (no training shift here)."""
    best = None
    for c, b in zip(cands, benefits):
        if b > 0 and (best is None or b > best[2]):
            best = (c.up, c.down, b)
    return best
