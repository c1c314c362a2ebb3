"""`Cluster`: the deployment's shared state, held alike by the runtime controller
(pivot/runtime/control/controller.py) and the simulator (pivot/sim/simulator.py).

It owns the replica table, the shift executor with the replica states, the replicas kept down
for good (`retired`) and the rollout and reward schedulers, all built by its constructor, and
answers a deployment mode's questions from them (it is the mode's `ModeHost`,
pivot/plan/modes.py): slots, up slots, the planner's snapshot.

What it calls back is its holder's, as two small protocols: `ShiftHost` (pivot/shift/executor.py:
what a shift does on the devices; real messages on the runtime, timed events in the simulator)
and `TrainingStatus` (how training stands, for the modes and the snapshot).

The table is kept in one place, the replica states' (a state is per replica of that table, and a
re-size must change both at once); the executor and the cluster read it there.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

from pivot.plan.planner import PlanTimings, ShiftPlan
from pivot.plan.snapshot import ClusterSnapshot
from pivot.sched.records import INFERENCE_ROLES, Replica
from pivot.sched.scheduler import ShiftAwareScheduler
from pivot.shift.executor import ShiftExecutor, ShiftHost
from pivot.shift.table import ReplicaTable, State


class TrainingStatus(Protocol):
    """How training stands, as the holder of the cluster runs it."""

    @property
    def training_in_flight(self) -> bool:
        """A training step is running (it must not be shifted down)."""

    def train_ready(self) -> bool:
        """The next step's batch is complete and no step is running."""

    def train_throughput(self) -> float:
        """Tokens/s of the running training step."""


class Cluster:
    def __init__(
        self,
        table: ReplicaTable,
        *,
        effects: ShiftHost,
        training: TrainingStatus,
        migrate: bool,
        clock: Callable[[], float] = time.monotonic,
        refresh: Callable[[], None] | None = None,
    ) -> None:
        """Every replica down, one scheduler per inference role over its slots (none active).
        `migrate`: the schedulers migrate sequences on a shift up (False: the ablation); `clock`
        times the shifts (the simulator passes its simulated time); `refresh`, called before a
        snapshot, brings the schedulers' view of the running sequences up to date (the
        simulator reports progress lazily; the runtime's arrives with every Stats)."""
        self.training = training
        self.refresh = refresh
        # replicas that stay down (their engines failed too often): no mode plans them
        self.retired: set[int] = set()
        self.shifts = ShiftExecutor(table, effects, clock)
        self.sched: dict[str, ShiftAwareScheduler] = {
            role: ShiftAwareScheduler(table.slots(role), active=[], migrate=migrate)
            for role in INFERENCE_ROLES
        }

    @property
    def table(self) -> ReplicaTable:
        return self.shifts.states.table

    @property
    def world(self) -> int:
        """Devices in the cluster, numbered 0..world-1."""
        return self.table.world

    @property
    def train_rid(self) -> int:
        return self.table.train_rid

    @property
    def in_flight(self) -> int:
        """Replicas shifting now (up or down)."""
        return self.shifts.states.in_flight

    @property
    def train_devices(self) -> int:
        """Devices of the training slot now."""
        return len(self.table.replicas[self.train_rid].devices)

    def execute(self, plan: ShiftPlan) -> None:
        """Carry out `plan` (the controller also counts and logs it)."""
        self.shifts.execute(plan)

    def move_training_slot(
        self, devices: int, execute: Callable[[ShiftPlan], None] | None = None
    ) -> bool:
        """One call of carrying out a decided re-size (pivot/sim/autosize.py), until it returns
        True: once no shift is in flight the trainer shifts down if it is up (through `execute`,
        default `Cluster.execute`: the controller counts and logs its plans); once it is down
        the slot takes the last `devices` devices (`pivot.dist.train_slot`), where the mode
        brings it up like any shift up. The caller records the move."""
        if self.in_flight:
            return False
        if self.is_up(self.train_rid):
            down = ShiftPlan(None, (), (self.train_rid,), 0.0, 0.0, PlanTimings())
            (execute or self.execute)(down)
            return False
        self.resize_training(range(self.world - devices, self.world))
        return True

    def resize_training(self, devices: Sequence[int]) -> None:
        """Give the training slot `devices` (a re-sized pool, pivot/sim/autosize.py). Only while
        the trainer is down and nothing shifts: its next shift up takes the new devices, and
        every other replica keeps its id, devices and state. Raises `ShiftError` otherwise."""
        self.shifts.states.resize(self.train_rid, tuple(devices))

    # ---- ModeHost (pivot/plan/modes.py) ------------------------------------------------------
    @property
    def training_in_flight(self) -> bool:
        return self.training.training_in_flight

    def train_ready(self) -> bool:
        return self.training.train_ready()

    def slots(self, role: str) -> list[Replica]:
        return [r for r in self.table.slots(role) if r.replica_id not in self.retired]

    def role_of(self, rid: int) -> str:
        return self.table.role_of(rid)

    def up_slots(self) -> list[int]:
        return self.shifts.states.up()

    def is_up(self, rid: int) -> bool:
        return self.shifts.states.state.get(rid) == State.UP

    def snapshot(self) -> ClusterSnapshot:
        if self.refresh is not None:
            self.refresh()
        active = frozenset(self.up_slots())
        training = self.training_in_flight
        return ClusterSnapshot(
            replicas=tuple(r for r in self.table.replicas if r.replica_id not in self.retired),
            active=active,
            running={
                rid: tuple(self.sched[self.role_of(rid)].running(rid))
                for rid in active
                if rid != self.train_rid
            },
            queues={role: tuple(self.sched[role].queued()) for role in INFERENCE_ROLES},
            # the planner locks the trainer (never shifts it down) when its batch is ready, so a
            # running step is reported as ready; a trainer that is down with its batch ready
            # makes training the shift-up role
            train_batch_ready=training or self.train_ready(),
            train_throughput=self.training.train_throughput() if training else 0.0,
            shift_s=self.shifts.timer.means(),
            devices=tuple(range(self.table.world)),
        )
