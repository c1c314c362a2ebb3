"""Deployment modes in the simulator, with the runtime's semantics (pivot/runtime/modes.py).

- pivot: the real planner (`pivot.plan.make_planner`: pivot, static, rule_based, ablation
  flags) on a `ClusterSnapshot` of the simulated state; starts with every device on inference.
- disaggregated: fixed pools (training on its own devices, the configured rollout and reward
  replicas, spare devices split evenly); never shifts.
- colocated: every device cycles rollout -> reward -> train, each phase a whole-cluster shift,
  on-policy (staleness 0).
- rr_colocated: rollout and reward alternate on the inference devices; training keeps its pool
  and overlaps within the staleness bound.
A mode answers `initial(sim)` (slots up at t=0) and `plan(sim)` (a `ShiftPlan` or None); the
simulator calls `plan` under the runtime's gating (no shift in flight, no training step).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from pivot.plan import PlanTimings, ShiftPlan, make_planner
from pivot.sched import Role

if TYPE_CHECKING:
    from pivot.sim.engine import Simulator


def _plan(up: list[int], down: list[int], role: str | None = None) -> ShiftPlan:
    return ShiftPlan(Role(role) if role else None, tuple(up), tuple(down), 0.0, 0.0, PlanTimings())


def pick_slots(sim: Simulator, role: str, free: set[int], count: int | None) -> list[int]:
    """Up to `count` (None: as many as fit) slots of `role` whose devices are all in `free`."""
    out: list[int] = []
    for slot in sim.layout.slots(role):
        if count is not None and len(out) >= count:
            break
        if set(slot.devices) <= free:
            out.append(slot.replica_id)
            free -= set(slot.devices)
    return out


def split_inference(sim: Simulator, free: set[int]) -> list[int]:
    """Each role's configured replicas, then spare devices split evenly (rollout first)."""
    cfg = sim.cfg
    up = pick_slots(sim, Role.ROLLOUT, free, cfg.rollout.replicas) + pick_slots(sim, Role.REWARD, free, cfg.reward.replicas)
    while True:
        more = pick_slots(sim, Role.ROLLOUT, free, 1) + pick_slots(sim, Role.REWARD, free, 1)
        if not more:
            return up
        up += more


class Mode(Protocol):
    name: str

    def initial(self, sim: Simulator) -> list[int]: ...

    def plan(self, sim: Simulator) -> ShiftPlan | None: ...


class Disaggregated:
    name = "disaggregated"

    def initial(self, sim: Simulator) -> list[int]:
        free = set(range(sim.layout.world)) - set(sim.layout.replicas[sim.layout.train_rid].devices)
        return split_inference(sim, free) + [sim.layout.train_rid]

    def plan(self, sim: Simulator) -> ShiftPlan | None:
        return None


class Shiftable:
    name = "pivot"

    def __init__(self, sim: Simulator) -> None:
        self.planner = make_planner(sim.cfg.planner)

    def initial(self, sim: Simulator) -> list[int]:
        return split_inference(sim, set(range(sim.layout.world)))

    def plan(self, sim: Simulator) -> ShiftPlan | None:
        snap = sim.snapshot()
        plan = self.planner.plan(snap)
        sim.on_planned(snap, plan, self.planner.last_timings.total_s)
        if plan is not None and sim.layout.train_rid in plan.down and sim.training:
            return None  # never interrupt a training step (runtime's rule)
        return plan


class Phased:
    def __init__(self, name: str, cycle: tuple[str, ...]) -> None:
        self.name, self.cycle = name, cycle

    def pool(self, sim: Simulator) -> set[int]:
        everything = set(range(sim.layout.world))
        return everything if Role.TRAIN in self.cycle else everything - set(sim.layout.replicas[sim.layout.train_rid].devices)

    def slots_for(self, sim: Simulator, role: str) -> list[int]:
        return [sim.layout.train_rid] if role == Role.TRAIN else pick_slots(sim, role, self.pool(sim), None)

    def initial(self, sim: Simulator) -> list[int]:
        fixed = [] if Role.TRAIN in self.cycle else [sim.layout.train_rid]
        return self.slots_for(sim, Role.ROLLOUT) + fixed

    def has_work(self, sim: Simulator, role: str) -> bool:
        if role == Role.TRAIN:
            return sim.train_ready() or sim.training
        return sim.sched[role].num_sequences() > 0

    def plan(self, sim: Simulator) -> ShiftPlan | None:
        up = [rid for rid in sim.up_slots() if sim.layout.role_of(rid) in self.cycle]
        if Role.TRAIN not in self.cycle:
            up = [rid for rid in up if rid != sim.layout.train_rid]
        current = sim.layout.role_of(up[0]) if up else None
        if current is not None and self.has_work(sim, current):
            return None
        start = self.cycle.index(current) + 1 if current else 0
        for k in range(len(self.cycle)):
            role = self.cycle[(start + k) % len(self.cycle)]
            if role != current and self.has_work(sim, role):
                return _plan(self.slots_for(sim, role), up, role)
        return None


def make_mode(sim: Simulator) -> Mode:
    mode = sim.cfg.cluster.mode
    if mode == "pivot":
        return Shiftable(sim)
    if mode == "disaggregated":
        return Disaggregated()
    if mode == "colocated":
        return Phased("colocated", (Role.ROLLOUT, Role.REWARD, Role.TRAIN))
    if mode == "rr_colocated":
        return Phased("rr_colocated", (Role.ROLLOUT, Role.REWARD))
    raise ValueError(f"cluster.mode={mode!r}: expected pivot, disaggregated, colocated or rr_colocated")
