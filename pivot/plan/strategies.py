"""Comparison strategies behind the `Planner` interface (paper §8.4), and `make_planner(cfg)`,
which picks the planner `cfg.strategy` names (pivot, static, rule_based or chaos).

- `StaticPlanner`: training shifts up when its batch is ready; when it is not, its devices
  are split evenly: reward slots inside the pool (ascending id) take up to half of its
  devices, rollout slots take the rest.
- `RuleBasedPlanner`: training as in static. A role whose KV utilisation (used / capacity of
  its up replicas; 1 if it has work but no replica) is above `rule_high` shifts up through
  the cheapest pair whose down side is only idle devices, an idle trainer or replicas of a
  role below `rule_low`; otherwise a role below `rule_low` shifts down its empty replicas
  (keeping one). Pair cost here counts sequences, not modelled throughput. Neither rule takes
  the last replica of a role that still has sequences: they would wait, unserved, until the
  role's utilisation rose again, which it cannot without a replica (a long rollout of the step
  the trainer waits for, stranded for most of a step).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from pivot.config import PlannerConfig
from pivot.plan.chaos import ChaosPlanner
from pivot.plan.pairs import build_pairs, training_pair
from pivot.plan.planner import PivotPlanner, Planner, PlanTimings, ShiftPlan
from pivot.plan.snapshot import ClusterSnapshot
from pivot.sched.records import INFERENCE_ROLES, Role, SeqState


def _train_plan(snap: ClusterSnapshot) -> ShiftPlan | None:
    """Training up when its batch is ready (mandatory), else None."""
    slot = snap.train_slot
    if slot is None or not snap.train_batch_ready or snap.train_active:
        return None
    pair = training_pair(snap, {}, 0.0)
    return ShiftPlan(Role.TRAIN, pair.up, pair.down, 0.0, 0.0, PlanTimings())


def _timed(plan: ShiftPlan | None, t0: float) -> tuple[ShiftPlan | None, PlanTimings]:
    timings = PlanTimings(preprocess_s=time.perf_counter() - t0)
    if plan is not None:
        plan = ShiftPlan(plan.up_role, plan.up, plan.down, plan.benefit, plan.penalty, timings)
    return plan, timings


class StaticPlanner:
    def __init__(self, cfg: PlannerConfig) -> None:
        self.cfg, self.last_timings = cfg, PlanTimings()

    def plan(self, snap: ClusterSnapshot) -> ShiftPlan | None:
        t0 = time.perf_counter()
        plan, self.last_timings = _timed(_train_plan(snap) or self._split(snap), t0)
        return plan

    def _split(self, snap: ClusterSnapshot) -> ShiftPlan | None:
        slot = snap.train_slot
        if slot is None or snap.train_batch_ready or not snap.train_active:
            return None
        pool, half = set(slot.devices), len(slot.devices) // 2
        held = snap.holders()
        taken: set[int] = set()
        up: list[int] = []
        for role, limit in ((Role.REWARD, half), (Role.ROLLOUT, len(pool))):
            for s in snap.slots(role):
                devs = set(s.devices)
                if s.replica_id in snap.active or not devs <= pool or devs & taken:
                    continue
                if any(held.get(d, slot.replica_id) != slot.replica_id for d in devs):
                    continue
                if len(taken & pool) + len(devs) > limit:
                    continue
                taken |= devs
                up.append(s.replica_id)
        return ShiftPlan(None, tuple(up), (slot.replica_id,), 0.0, 0.0, PlanTimings())


class RuleBasedPlanner:
    def __init__(self, cfg: PlannerConfig) -> None:
        self.cfg, self.last_timings = cfg, PlanTimings()

    def plan(self, snap: ClusterSnapshot) -> ShiftPlan | None:
        t0 = time.perf_counter()
        plan, self.last_timings = _timed(_train_plan(snap) or self._rules(snap), t0)
        return plan

    def _rules(self, snap: ClusterSnapshot) -> ShiftPlan | None:
        cfg = self.cfg
        util = {role: self._util(snap, role) for role in INFERENCE_ROLES}
        low = {role for role in INFERENCE_ROLES if util[role] < cfg.rule_low}
        role_of = {r.replica_id: r.role for r in snap.replicas}
        counts = {rid: float(len(seqs)) for rid, seqs in snap.running.items()}
        train = snap.train_slot
        if train is not None and snap.train_active and not snap.train_batch_ready:
            counts[train.replica_id] = 0.0
        for role in sorted(INFERENCE_ROLES, key=lambda r: (-util[r], r)):
            if util[role] <= cfg.rule_high:
                continue
            for pair in build_pairs(snap, role, counts, 1.0):
                if all(
                    role_of[d] in low or role_of[d] == Role.TRAIN for d in pair.down
                ) and not self._strands(snap, pair.down):
                    return ShiftPlan(role, pair.up, pair.down, 0.0, pair.penalty, PlanTimings())
        for role in sorted(low):
            up = [r.replica_id for r in snap.slots(role) if r.replica_id in snap.active]
            empty = [rid for rid in up if not snap.running.get(rid)]
            if len(empty) == len(up):
                empty = empty[1:]  # keep one replica up
            if empty:
                return ShiftPlan(None, (), tuple(empty), 0.0, 0.0, PlanTimings())
        return None

    @staticmethod
    def _strands(snap: ClusterSnapshot, down: tuple[int, ...]) -> bool:
        """Whether shifting `down` leaves a role with sequences and no replica up."""
        for role in INFERENCE_ROLES:
            up = [r.replica_id for r in snap.slots(role) if r.replica_id in snap.active]
            has_work = bool(snap.queues.get(role)) or any(snap.running.get(rid) for rid in up)
            if has_work and up and set(up) <= set(down):
                return True
        return False

    @staticmethod
    def _util(snap: ClusterSnapshot, role: Role) -> float:
        up = [r for r in snap.slots(role) if r.replica_id in snap.active]
        cap = sum(r.kv_capacity for r in up)
        used = sum(s.length for r in up for s in snap.running.get(r.replica_id, ()))
        if cap <= 0:
            return 1.0 if snap.queues.get(role) else 0.0
        return used / cap


def make_planner(cfg: PlannerConfig, priority: Callable[[SeqState], Any] | None = None) -> Planner:
    """The planner named by `cfg.strategy` ("pivot", "static", "rule_based", "chaos")."""
    if cfg.strategy == "pivot":
        return PivotPlanner(cfg, priority)
    if cfg.strategy == "static":
        return StaticPlanner(cfg)
    if cfg.strategy == "rule_based":
        return RuleBasedPlanner(cfg)
    if cfg.strategy == "chaos":
        return ChaosPlanner(cfg)
    raise ValueError(
        f"planner.strategy={cfg.strategy!r}: expected pivot, static, rule_based or chaos"
    )
