"""The planner (paper §7): `Planner.plan(snapshot) -> ShiftPlan | None`, run on rank 0 and in sim/.

`PivotPlanner` runs the five steps: (1) shift-up role, (2) shift pairs with penalties,
(3) candidates by Algorithm 1, (4) benefit by migration simulation, of every candidate while
that fits `cfg.budget_s` of planning time (and `cfg.max_evaluated`, if set), of a coarse-to-fine
choice of what the budget affords beyond (search.py), (5) the
largest positive benefit among those evaluated, or no shift. A candidate that would take an
inference role below its reserve of devices outside the training slot (`planner.reserve_*`,
`pairs.within_reserves`) is never chosen. Training shifts up as a whole and
only when its batch is ready: that shift is mandatory (the step cannot run otherwise), so it is
returned whatever its benefit.
The ablations are flags of the same planner: `throughput_model=False` (T_i is 1 for a busy
replica, else 0) and `migration=False` (shift-up simulation stops after draining the queue).
`strategies.make_planner(cfg)` picks pivot / static / rule_based. Every planner keeps
the phase timings of its last call in `last_timings`, also when it returns None.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from pivot.config import PlannerConfig
from pivot.plan.candidates import Candidate, CandidateTable
from pivot.plan.evaluate import CandidateEvaluator, benefit
from pivot.plan.pairs import (
    build_pairs,
    choose_up_role,
    replica_rates,
    training_pair,
    within_reserves,
)
from pivot.plan.search import within_budget
from pivot.plan.snapshot import ClusterSnapshot
from pivot.sched.records import INFERENCE_ROLES, Role, SeqState
from pivot.sched.scheduler import ShiftAwareScheduler

TIE = 1e-9
"""Benefits within this share of each other are equal (the test's tolerance, pytest.approx)."""


@dataclass(frozen=True)
class PlanTimings:
    """Seconds spent in each planner phase (the paper's Table 2 split)."""

    preprocess_s: float = 0.0
    construct_s: float = 0.0
    simulate_s: float = 0.0
    cpu_s: tuple[float, float, float] = (0.0, 0.0, 0.0)
    """Process CPU seconds of the same three phases (robust when other jobs share the cores)."""

    @property
    def total_s(self) -> float:
        return self.preprocess_s + self.construct_s + self.simulate_s

    @property
    def total_cpu_s(self) -> float:
        return sum(self.cpu_s)


@dataclass(frozen=True)
class ShiftPlan:
    up_role: Role | None
    """Role gaining devices; None when several roles gain (the static split)."""
    up: tuple[int, ...]
    """Slot ids to shift up."""
    down: tuple[int, ...]
    """Replica ids to shift down first (any role, the training slot included)."""
    benefit: float
    penalty: float
    timings: PlanTimings
    num_candidates: int = 1
    """Candidates Algorithm 1 produced."""
    num_evaluated: int = 1
    """Candidates whose migration was simulated (all of them within the planning budget)."""


class Planner(Protocol):
    """Interface: `plan(snapshot)` returns a `ShiftPlan`, or None to keep the allocation."""

    cfg: PlannerConfig
    """Settable: the deployment mode narrows the reserves once a sizing decided them."""
    last_timings: PlanTimings
    """The phase timings of the last `plan` call (zeros before the first)."""

    def plan(self, snap: ClusterSnapshot) -> ShiftPlan | None: ...


class PivotPlanner:
    def __init__(
        self, cfg: PlannerConfig, priority: Callable[[SeqState], Any] | None = None
    ) -> None:
        self.cfg, self.priority = cfg, priority
        self.last_timings = PlanTimings()
        self.last_candidates: list[
            tuple[Candidate, float]
        ] = []  # evaluated (candidate, benefit), ascending k
        self.last_num_candidates = 0  # all candidates of the last call, evaluated or not

    def plan(self, snap: ClusterSnapshot) -> ShiftPlan | None:
        # The cyclic GC is paused for the call: step 4 allocates many short-lived acyclic tuples,
        # which trigger collections whose full passes walk every object of the process (the
        # schedulers' tables: ~50k objects at 4096 devices), 5-15% of the call and most of its
        # variance. Reference counting still frees all of it; nothing here forms cycles.
        paused = gc.isenabled()
        if paused:
            gc.disable()
        try:
            return self._plan(snap)
        finally:
            if paused:
                gc.enable()

    def _plan(self, snap: ClusterSnapshot) -> ShiftPlan | None:
        cfg, binary = self.cfg, not self.cfg.throughput_model
        t0, c0 = time.perf_counter(), time.process_time()
        scheds: dict[str, ShiftAwareScheduler] = {
            r: snap.scheduler(r, self.priority, migrate=cfg.migration) for r in INFERENCE_ROLES
        }
        rates = replica_rates(snap, scheds, binary)
        up_role = choose_up_role(snap, scheds, binary)
        pairs = []
        # measured once that role's shifts were timed
        tau = snap.shift_s.get(up_role, cfg.tau_shift_s) if up_role is not None else cfg.tau_shift_s
        # aborted KV moves instead of being recomputed
        share = cfg.kv_refill_share if cfg.kv_migration else 1.0
        if up_role == Role.TRAIN:
            pairs = [training_pair(snap, rates, tau, share)]
        elif up_role is not None:
            pairs = build_pairs(snap, up_role, rates, tau, share)
        t1, c1 = time.perf_counter(), time.process_time()
        table = CandidateTable(pairs, sum(len(p.up) for p in pairs))
        ks = table.ks
        t2, c2 = time.perf_counter(), time.process_time()
        scored: list[tuple[Candidate, float]] = []
        if ks:
            ev = CandidateEvaluator(snap, scheds, binary)
            cands: dict[int, Candidate] = {}  # only the evaluated ones are assembled

            reserves = {Role.ROLLOUT: cfg.reserve_rollout, Role.REWARD: cfg.reserve_reward}
            kept = up_role == Role.TRAIN or not any(reserves.values())  # training's is mandatory

            def score(i: int) -> float:
                c = cands[i] = table.candidate(ks[i])
                if not (kept or within_reserves(snap, c.down, reserves)):
                    return -math.inf  # never chosen: a plan needs a positive benefit
                return benefit(cfg.horizon_s, ev.throughput_after(c), ev.current, c.penalty)

            found = within_budget(ks, cfg.max_evaluated, cfg.budget_s, score)
            scored = [(cands[i], found[i]) for i in sorted(found)]
        t3, c3 = time.perf_counter(), time.process_time()
        self.last_timings = PlanTimings(t1 - t0, t2 - t1, t3 - t2, (c1 - c0, c2 - c1, c3 - c2))
        self.last_candidates, self.last_num_candidates = scored, len(ks)
        best: tuple[Candidate, float] | None = None
        for c, b in scored:  # ascending k: on equal benefit the smaller shift wins
            # equal within float noise: shifting idle extra replicas changes the benefit only
            # in its last bits, which must not buy the larger shift (tests/plan/test_planner.py)
            if (up_role == Role.TRAIN or b > 0) and (
                best is None or b > best[1] + TIE * max(1.0, abs(best[1]))
            ):
                best = (c, b)
        if best is None:
            return None
        c, b = best
        return ShiftPlan(
            up_role, c.up, c.down, b, c.penalty, self.last_timings, len(ks), len(scored)
        )
