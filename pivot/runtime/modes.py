"""Deployment modes on one runtime: where roles start and when devices change hands.

- pivot: shiftable; the planner (pivot, static or rule_based, plus ablation flags) decides.
- disaggregated: fixed pools (training on its own devices, the rest split between rollout and
  reward); never shifts.
- colocated: every role shares every device; phases run in sequence (rollout -> reward ->
  train), each phase a shift of the whole cluster, on-policy (staleness 0).
- rr_colocated: rollout and reward alternate on the shared inference devices; training keeps
  its own pool and overlaps within the staleness bound.
Phase switches reuse the shift machinery, so a colocated phase change is exactly a shift.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pivot.plan import PlanTimings, ShiftPlan, make_planner

if TYPE_CHECKING:
    from pivot.runtime.controller import Controller


def _plan(up: list[int], down: list[int], role: str | None = None) -> ShiftPlan:
    return ShiftPlan(role, tuple(up), tuple(down), 0.0, 0.0, PlanTimings())


def pick_slots(ctrl: Controller, role: str, free: set[int], count: int | None) -> list[int]:
    """Up to `count` (None: as many as fit) slots of `role` whose ranks are all in `free`."""
    out: list[int] = []
    for slot in ctrl.table.of(role):
        if count is not None and len(out) >= count:
            break
        if slot.ranks and set(slot.ranks) <= free:
            out.append(ctrl.rid[(role, slot.index)])
            free -= set(slot.ranks)
    return out


def split_inference(ctrl: Controller, free: set[int]) -> list[int]:
    """Each inference role's configured replicas, then spare devices split evenly (rollout first)."""
    cfg = ctrl.cfg
    up = pick_slots(ctrl, "rollout", free, cfg.rollout.replicas) + pick_slots(ctrl, "reward", free, cfg.reward.replicas)
    while True:
        more = pick_slots(ctrl, "rollout", free, 1) + pick_slots(ctrl, "reward", free, 1)
        if not more:
            return up
        up += more


class Disaggregated:
    name = "disaggregated"
    interval_s = 1.0

    def initial(self, ctrl: Controller) -> ShiftPlan:
        free = set(range(ctrl.world)) - set(ctrl.table.train.ranks)
        return _plan(split_inference(ctrl, free) + [ctrl.train_rid], [])

    def plan(self, ctrl: Controller) -> ShiftPlan | None:
        return None


class Shiftable:
    """Pivot mode: training starts down (no batch yet), all devices serve inference."""

    name = "pivot"

    def __init__(self, ctrl_cfg: object) -> None:
        self.planner = make_planner(ctrl_cfg)
        self.interval_s = ctrl_cfg.interval_s

    def initial(self, ctrl: Controller) -> ShiftPlan:
        return _plan(split_inference(ctrl, set(range(ctrl.world))), [])

    def plan(self, ctrl: Controller) -> ShiftPlan | None:
        plan = self.planner.plan(ctrl.snapshot())
        if plan is not None and ctrl.train_rid in plan.down and ctrl.training is not None:
            return None  # never interrupt a training step
        return plan


class Phased:
    """Colocated (cycle rollout -> reward -> train over every device) and rr_colocated (cycle
    rollout -> reward over the inference devices, training fixed on its own pool)."""

    interval_s = 0.02  # a phase ends on an event; checking it is cheap

    def __init__(self, name: str, cycle: tuple[str, ...]) -> None:
        self.name, self.cycle = name, cycle

    def pool(self, ctrl: Controller) -> set[int]:
        everything = set(range(ctrl.world))
        return everything if "train" in self.cycle else everything - set(ctrl.table.train.ranks)

    def slots_for(self, ctrl: Controller, role: str) -> list[int]:
        return [ctrl.train_rid] if role == "train" else pick_slots(ctrl, role, self.pool(ctrl), None)

    def initial(self, ctrl: Controller) -> ShiftPlan:
        fixed = [] if "train" in self.cycle else [ctrl.train_rid]
        return _plan(self.slots_for(ctrl, "rollout") + fixed, [])

    def has_work(self, ctrl: Controller, role: str) -> bool:
        if role == "train":
            return ctrl.train_ready() or ctrl.training is not None
        return ctrl.sched[role].num_sequences() > 0

    def plan(self, ctrl: Controller) -> ShiftPlan | None:
        up = [rid for rid, s in ctrl.state.items() if s == "up" and ctrl.slot_of[rid][0] in self.cycle]
        if "train" not in self.cycle:
            up = [rid for rid in up if rid != ctrl.train_rid]
        current = ctrl.slot_of[up[0]][0] if up else None
        if current is not None and self.has_work(ctrl, current):
            return None
        start = self.cycle.index(current) + 1 if current else 0
        for k in range(len(self.cycle)):
            role = self.cycle[(start + k) % len(self.cycle)]
            if role != current and self.has_work(ctrl, role):
                return _plan(self.slots_for(ctrl, role), up, role)
        return None


def make_mode(cfg: object) -> object:
    mode = cfg.cluster.mode
    if mode == "pivot":
        return Shiftable(cfg.planner)
    if mode == "disaggregated":
        return Disaggregated()
    if mode == "colocated":
        return Phased("colocated", ("rollout", "reward", "train"))
    return Phased("rr_colocated", ("rollout", "reward"))
