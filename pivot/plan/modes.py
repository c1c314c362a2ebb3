"""Deployment modes: where roles start and when devices change hands. One implementation serves
the runtime's `Controller` and the simulator's `Simulator`: each holds a `pivot.shift.Cluster`,
which is the modes' `ModeHost`.

- pivot: shiftable; the planner (`make_planner(cfg.planner)`: pivot, static or rule_based, plus
  ablation flags) decides on a `ClusterSnapshot`; starts with every device on inference.
- disaggregated: fixed pools (training on its own devices, the configured rollout and reward
  replicas, spare devices split evenly); never shifts.
- colocated: every device cycles rollout -> reward -> train, each phase a whole-cluster shift,
  on-policy (staleness 0).
- rr_colocated: rollout and reward alternate on the inference devices; training keeps its pool
  and overlaps within the staleness bound.
A mode answers `initial(host)` (the plan that brings slots up at start) and `plan(host)` (a
`ShiftPlan` or None). The host decides when to call `plan` (its gating: no shift in flight,
at most every `interval_s`), so a phase switch is exactly a shift.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from pivot.config import PivotConfig
from pivot.plan.planner import PlanTimings, ShiftPlan
from pivot.plan.snapshot import ClusterSnapshot
from pivot.plan.strategies import make_planner
from pivot.sched.records import Replica, Role
from pivot.sched.scheduler import ShiftAwareScheduler

OnPlanned = Callable[[ClusterSnapshot, ShiftPlan | None, float], None]
"""Called with (snapshot, the planner's plan before the training lock, planner seconds)."""


class ModeHost(Protocol):
    """What a mode reads from the cluster it drives (runtime controller or simulator)."""

    @property
    def world(self) -> int:
        """Devices in the cluster, numbered 0..world-1."""

    @property
    def train_rid(self) -> int: ...

    @property
    def sched(self) -> Mapping[str, ShiftAwareScheduler]:
        """The scheduler of each inference role."""

    @property
    def training_in_flight(self) -> bool:
        """A training step is running (it must not be shifted down)."""

    def slots(self, role: str) -> Sequence[Replica]:
        """Every slot of `role` (replica id and devices), in layout order."""

    def up_slots(self) -> list[int]:
        """Replica ids whose shift up has completed and that are not shifting down."""

    def role_of(self, rid: int) -> str: ...

    def train_ready(self) -> bool:
        """The next step's batch is complete and no step is running."""

    def snapshot(self) -> ClusterSnapshot: ...


class Mode(Protocol):
    name: str
    interval_s: float
    """Least seconds between two `plan` calls on the runtime."""

    def initial(self, host: ModeHost) -> ShiftPlan: ...

    def plan(self, host: ModeHost) -> ShiftPlan | None: ...


def _plan(up: list[int], down: list[int], role: str | None = None) -> ShiftPlan:
    return ShiftPlan(Role(role) if role else None, tuple(up), tuple(down), 0.0, 0.0, PlanTimings())


def pick_slots(host: ModeHost, role: str, free: set[int], count: int | None) -> list[int]:
    """Up to `count` (None: as many as fit) slots of `role` whose devices are all in `free`;
    their devices leave `free`."""
    out: list[int] = []
    for slot in host.slots(role):
        if count is not None and len(out) >= count:
            break
        if set(slot.devices) <= free:
            out.append(slot.replica_id)
            free -= set(slot.devices)
    return out


def split_inference(host: ModeHost, free: set[int], start: tuple[int, int]) -> list[int]:
    """Each inference role's configured replicas (`start`: rollout's, reward's), then spare
    devices split evenly (rollout first)."""
    up = pick_slots(host, Role.ROLLOUT, free, start[0]) + pick_slots(
        host, Role.REWARD, free, start[1]
    )
    while True:
        more = pick_slots(host, Role.ROLLOUT, free, 1) + pick_slots(host, Role.REWARD, free, 1)
        if not more:
            return up
        up += more


def inference_pool(host: ModeHost) -> set[int]:
    """Every device outside the training slot."""
    return set(range(host.world)) - {d for slot in host.slots(Role.TRAIN) for d in slot.devices}


def start_replicas(cfg: PivotConfig) -> tuple[int, int]:
    """Rollout's and reward's replicas at start (`rollout.replicas`, `reward.replicas`)."""
    return cfg.rollout.replicas, cfg.reward.replicas


class Disaggregated:
    name = "disaggregated"
    interval_s = 1.0  # plan() is constant; checking it rarely is enough

    def __init__(self, cfg: PivotConfig) -> None:
        self.start = start_replicas(cfg)

    def initial(self, host: ModeHost) -> ShiftPlan:
        pool = inference_pool(host)
        return _plan(split_inference(host, pool, self.start) + [host.train_rid], [])

    def plan(self, host: ModeHost) -> ShiftPlan | None:
        return None


class Shiftable:
    """Pivot mode: training starts down (no batch yet), all devices serve inference."""

    name = "pivot"

    def __init__(self, cfg: PivotConfig, on_planned: OnPlanned | None = None) -> None:
        self.planner = make_planner(cfg.planner)
        self.interval_s = cfg.planner.interval_s
        self.on_planned = on_planned
        self.start = start_replicas(cfg)

    def initial(self, host: ModeHost) -> ShiftPlan:
        return _plan(split_inference(host, set(range(host.world)), self.start), [])

    def reserve(self, rollout: int, reward: int) -> None:
        """The planner's reserved split from now on (`planner.reserve_*`; 0, 0: none), as the
        training slot's sizing decides it (pivot/sim/autosize.py)."""
        cfg = dataclasses.replace(self.planner.cfg, reserve_rollout=rollout, reserve_reward=reward)
        self.planner.cfg = cfg

    def plan(self, host: ModeHost) -> ShiftPlan | None:
        snap = host.snapshot()
        plan = self.planner.plan(snap)
        if self.on_planned is not None:
            self.on_planned(snap, plan, self.planner.last_timings.total_s)
        if plan is not None and host.train_rid in plan.down and host.training_in_flight:
            return None  # never interrupt a training step
        return plan


class Phased:
    """Colocated (cycle rollout -> reward -> train over every device) and rr_colocated (cycle
    rollout -> reward over the inference devices, training fixed on its own pool)."""

    interval_s = 0.02  # a phase ends on an event; checking it is cheap

    def __init__(self, name: str, cycle: tuple[Role, ...]) -> None:
        self.name, self.cycle = name, cycle

    def pool(self, host: ModeHost) -> set[int]:
        return set(range(host.world)) if Role.TRAIN in self.cycle else inference_pool(host)

    def slots_for(self, host: ModeHost, role: str) -> list[int]:
        return (
            [host.train_rid]
            if role == Role.TRAIN
            else pick_slots(host, role, self.pool(host), None)
        )

    def initial(self, host: ModeHost) -> ShiftPlan:
        fixed = [] if Role.TRAIN in self.cycle else [host.train_rid]
        return _plan(self.slots_for(host, Role.ROLLOUT) + fixed, [])

    def has_work(self, host: ModeHost, role: str) -> bool:
        if role == Role.TRAIN:
            return host.train_ready() or host.training_in_flight
        return host.sched[role].num_sequences() > 0

    def plan(self, host: ModeHost) -> ShiftPlan | None:
        up = [rid for rid in host.up_slots() if host.role_of(rid) in self.cycle]
        if Role.TRAIN not in self.cycle:
            up = [rid for rid in up if rid != host.train_rid]
        current = host.role_of(up[0]) if up else None
        if current is not None and self.has_work(host, current):
            return None
        start = self.cycle.index(current) + 1 if current else 0
        for k in range(len(self.cycle)):
            role = self.cycle[(start + k) % len(self.cycle)]
            if role != current and self.has_work(host, role):
                return _plan(self.slots_for(host, role), up, role)
        return None


def split_reserves(world: int, train_devices: int, rollout: int) -> tuple[int, int]:
    """The planner's reserves (rollout's, reward's) for a split of the inference devices beside a
    slot of `train_devices`: `rollout` for rollout, the rest for reward; 0: none."""
    return rollout, world - train_devices - rollout if rollout else 0


def reserve(mode: Mode, world: int, train_devices: int, rollout: int) -> None:
    """Set the planner's reserved split (`Shiftable.reserve`, `split_reserves`). A mode without a
    planner has none."""
    if isinstance(mode, Shiftable):
        mode.reserve(*split_reserves(world, train_devices, rollout))


def rollout_reserve(mode: Mode) -> int:
    """Rollout's reserved devices now (0: none, or a mode without a planner)."""
    return mode.planner.cfg.reserve_rollout if isinstance(mode, Shiftable) else 0


def make_mode(cfg: PivotConfig, on_planned: OnPlanned | None = None) -> Mode:
    """The mode named by `cfg.cluster.mode`; `on_planned` sees every planner call (pivot mode)."""
    mode = cfg.cluster.mode
    if mode == "pivot":
        return Shiftable(cfg, on_planned)
    if mode == "disaggregated":
        return Disaggregated(cfg)
    if mode == "colocated":
        return Phased("colocated", (Role.ROLLOUT, Role.REWARD, Role.TRAIN))
    if mode == "rr_colocated":
        return Phased("rr_colocated", (Role.ROLLOUT, Role.REWARD))
    raise ValueError(
        f"cluster.mode={mode!r}: expected pivot, disaggregated, colocated or rr_colocated"
    )
