"""`ClusterHost`: what the runtime controller and the simulator share as the host of a
deployment mode (`ModeHost`, pivot/plan/modes.py) and of the shift executor (`ShiftHost`).

It owns the replica table, the shift executor with the replica states, and the rollout and
reward schedulers, and answers the mode's questions from them (slots, up slots, the planner's
snapshot). A subclass says how training stands (`training_in_flight`, `train_ready`,
`train_throughput`) and supplies the shift effects (`migrate_off`, `release`, `acquire`,
`migrate_on`): real messages in pivot/runtime/control/controller.py, timed events in pivot/sim/simulator.py.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

from pivot.plan.planner import PlanTimings, ShiftPlan
from pivot.plan.snapshot import ClusterSnapshot
from pivot.sched.records import INFERENCE_ROLES, Replica
from pivot.sched.scheduler import ShiftAwareScheduler
from pivot.shift.executor import ShiftExecutor
from pivot.shift.table import ReplicaTable, ShiftError, State


class ClusterHost:
    def init_cluster(
        self, table: ReplicaTable, migrate: bool, clock: Callable[[], float] = time.monotonic
    ) -> None:
        """Every replica down, one scheduler per inference role over its slots (none active);
        `clock` times the shifts (the simulator passes its simulated time)."""
        self.table = table
        # replicas that stay down (their engines failed too often): no mode plans them
        self.retired: set[int] = set()
        self.shifts = ShiftExecutor(table, self, clock)  # type: ignore[arg-type]  # the subclass is the ShiftHost
        self.sched: dict[str, ShiftAwareScheduler] = {
            role: ShiftAwareScheduler(table.slots(role), active=[], migrate=migrate)
            for role in INFERENCE_ROLES
        }

    @property
    def train_devices(self) -> int:
        """Devices of the training slot now."""
        return len(self.table.replicas[self.train_rid].devices)

    def execute(self, plan: ShiftPlan) -> None:
        """Carry out `plan` (the controller also counts and logs it)."""
        self.shifts.execute(plan)

    def move_training_slot(self, devices: int) -> bool:
        """One call of carrying out a decided re-size (pivot/sim/autosize.py), until it returns
        True: once no shift is in flight the trainer shifts down if it is up; once it is down
        the slot takes the last `devices` devices (`pivot.dist.train_slot`), where the mode
        brings it up like any shift up. The caller records the move."""
        if self.shifts.states.in_flight:
            return False
        if self.is_up(self.train_rid):
            self.execute(ShiftPlan(None, (), (self.train_rid,), 0.0, 0.0, PlanTimings()))
            return False
        self.resize_training(range(self.world - devices, self.world))
        return True

    def resize_training(self, devices: Sequence[int]) -> None:
        """Give the training slot `devices` (a re-sized pool, pivot/sim/autosize.py). Only while
        the trainer is down and nothing shifts: its next shift up takes the new devices, and
        every other replica keeps its id, devices and state. Raises `ShiftError` otherwise."""
        rid = self.table.train_rid
        if self.shifts.states.in_flight or self.shifts.states[rid] != State.DOWN:
            raise ShiftError(
                f"{self.table.name(rid)}: cannot be re-sized while {self.shifts.states[rid]} "
                f"with {self.shifts.states.in_flight} shift(s) in flight (needs down, none)"
            )
        replicas = list(self.table.replicas)
        replicas[rid] = dataclasses.replace(replicas[rid], devices=tuple(devices))
        table = dataclasses.replace(self.table, replicas=tuple(replicas))
        # the one table every part reads: the states' and the executor's are the host's
        self.table = self.shifts.table = self.shifts.states.table = table

    # ---- training, as the subclass runs it ----------------------------------------------------
    @property
    def training_in_flight(self) -> bool:
        """A training step is running (it must not be shifted down)."""
        raise NotImplementedError

    def train_ready(self) -> bool:
        """The next step's batch is complete and no step is running."""
        raise NotImplementedError

    def train_throughput(self) -> float:
        """Tokens/s of the running training step."""
        raise NotImplementedError

    # ---- ModeHost ----------------------------------------------------------------------------
    @property
    def world(self) -> int:
        return self.table.world

    @property
    def train_rid(self) -> int:
        return self.table.train_rid

    def slots(self, role: str) -> list[Replica]:
        return [r for r in self.table.slots(role) if r.replica_id not in self.retired]

    def role_of(self, rid: int) -> str:
        return self.table.role_of(rid)

    def up_slots(self) -> list[int]:
        return self.shifts.states.up()

    def is_up(self, rid: int) -> bool:
        return self.shifts.states.state.get(rid) == State.UP

    def snapshot(self) -> ClusterSnapshot:
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
            train_throughput=self.train_throughput() if training else 0.0,
            shift_s=self.shifts.timer.means(),
            devices=tuple(range(self.table.world)),
        )
