"""The shift executor: a `ShiftPlan` turned into ordered actions, run through a host.

A plan (from the deployment mode or the planner, pivot/plan/) names replicas to shift down and
replicas to shift up. `plan_actions` orders what happens, phase by phase:

1. `MIGRATE_OFF` (the inference replicas shifting down): each role's scheduler runs Algorithm 3
   once over all of that role's leaving replicas, as the planner's what-if did
   (pivot/sched/trial.py): it aborts their sequences, keeping their generated tokens, and
   dispatches them onto the replicas that stay. One replica at a time would dispatch onto
   replicas about to leave in the same plan, then abort there again, and end in a placement
   the planner never scored.
2. `RELEASE`: the replica's devices leave its slot: temporary context and weights are
   discarded (GPS holds the weights), offloadable context goes to host memory.
3. `ACQUIRE` (each replica shifting up): its devices Read the role's weights from GPS in the
   slot's layout and join the slot's process group (training: reload the optimizer state).
4. `MIGRATE_ON` (once an inference replica is up): its scheduler dispatches the waiting queue
   onto the new replicas, then migrates sequences onto them while the throughput grows.

Every shift down is issued before any shift up, so on a device that changes role the release
precedes the acquire. Training shifts as a whole: it is one slot covering the training pool.

The host supplies the effects (`ShiftHost`, the holder of the `Cluster`, pivot/shift/cluster.py):
the runtime controller (pivot/runtime/control/controller.py, through its `WorkerShifts` part) sends
ShiftDown/ShiftUp to the workers (pivot/runtime/job/worker.py, which calls the roles in
pivot/roles/ and GPS through pivot/runtime/weights/service.py) and reports completion when every rank's
ShiftDone is in; the simulator (pivot/sim/simulator.py) schedules timed events at the shift
costs of pivot/sim/costs.py. Either way the host calls `ShiftExecutor.complete`, which moves
the replica states on and runs `MIGRATE_ON`.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from pivot.plan.planner import ShiftPlan
from pivot.sched.records import INFERENCE_ROLES, Role
from pivot.shift.table import ReplicaStates, ReplicaTable, ShiftError
from pivot.shift.timing import ShiftTimer


class Phase(enum.StrEnum):
    MIGRATE_OFF = "migrate_off"
    RELEASE = "release"
    ACQUIRE = "acquire"
    MIGRATE_ON = "migrate_on"


@dataclass(frozen=True)
class ShiftAction:
    phase: Phase
    rid: int
    role: str
    slot: int
    """The slot index within its role, as the control messages name it."""


class ShiftHost(Protocol):
    """The effects of a shift, supplied by the runtime (messages) or the simulator (timed events)."""

    def migrate_off(self, role: str, rids: list[int]) -> None:
        """Apply `role`'s scheduler commands for replicas `rids` leaving together (Algorithm 3)."""

    def release(self, rid: int) -> None:
        """Start releasing `rid`'s devices; report completion through `ShiftExecutor.complete`."""

    def acquire(self, rid: int) -> None:
        """Start `rid`'s GPS Read and join; report completion through `ShiftExecutor.complete`."""

    def migrate_on(self, role: str, rids: list[int]) -> None:
        """Apply `role`'s scheduler commands for replicas `rids` joining (Algorithm 4)."""


def plan_actions(plan: ShiftPlan, table: ReplicaTable) -> list[ShiftAction]:
    """The actions that start `plan`, in order (`MIGRATE_ON` follows each completed shift up)."""
    seen: set[int] = set()
    for rid in (*plan.down, *plan.up):
        if not 0 <= rid < len(table.replicas):
            raise ShiftError(
                f"plan names replica {rid}: not in the table (ids 0..{len(table.replicas) - 1})"
            )
        if rid in seen:
            raise ShiftError(
                f"plan names {table.name(rid)} twice (up {list(plan.up)}, down {list(plan.down)})"
            )
        seen.add(rid)
    # every leaving replica's sequences migrate off before any device is released
    down = [ShiftAction(Phase.RELEASE, rid, *table.slot_of(rid)) for rid in plan.down]
    out = [
        ShiftAction(Phase.MIGRATE_OFF, a.rid, a.role, a.slot) for a in down if a.role != Role.TRAIN
    ]
    out += down
    for rid in plan.up:
        out.append(ShiftAction(Phase.ACQUIRE, rid, *table.slot_of(rid)))
    return out


class ShiftExecutor:
    """Runs plans on `host` and keeps the replica states and the measured shift durations
    (`timer`, read by `clock`: the runtime's monotonic one, the simulator's simulated one)."""

    def __init__(
        self, table: ReplicaTable, host: ShiftHost, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.host, self.clock = host, clock
        self.states = ReplicaStates(table)
        self.timer = ShiftTimer()

    @property
    def table(self) -> ReplicaTable:
        """The replica table, the states' (its one place: a re-size replaces it there)."""
        return self.states.table

    def execute(self, plan: ShiftPlan) -> list[ShiftAction]:
        """Check the whole plan against the states, then start it; raises `ShiftError` (and
        changes nothing) if any of its shifts is illegal now."""
        actions = plan_actions(plan, self.table)
        leaving = frozenset(plan.down)
        for rid in plan.down:
            self.states.check_start(rid, up=False)
        taken: dict[int, int] = {}
        for rid in plan.up:
            self.states.check_start(rid, up=True, leaving=leaving)
            for d in self.table.replicas[rid].devices:
                if d in taken:
                    raise ShiftError(
                        f"plan shifts up {self.table.name(taken[d])} and {self.table.name(rid)}, "
                        f"both on device {d}"
                    )
                taken[d] = rid
        up_roles = {self.table.role_of(rid) for rid in plan.up}
        if plan.down and len(up_roles) == 1:
            self.timer.started(up_roles.pop(), (*plan.up, *plan.down), self.clock())
        leaving_by_role: dict[str, list[int]] = {}
        for a in actions:
            if a.phase == Phase.MIGRATE_OFF:
                leaving_by_role.setdefault(a.role, []).append(a.rid)
        for role, rids in leaving_by_role.items():  # Algorithm 3 once per role, as planned
            self.host.migrate_off(role, rids)
        for a in actions:
            if a.phase == Phase.MIGRATE_OFF:
                continue
            if a.phase == Phase.RELEASE:
                self.states.start(a.rid, up=False)
                self.host.release(a.rid)
            else:
                self.states.start(a.rid, up=True)
                self.host.acquire(a.rid)
        return actions

    def complete(self, rids: Sequence[int]) -> None:
        """Shifts of `rids` finished (at the same instant): move their states on, then the
        replicas that came up join their scheduler together, one `migrate_on` per role (one
        replica at a time would take the whole queue first, then migrate it away)."""
        self.timer.completed(rids, self.clock())
        joining: dict[str, list[int]] = {}
        for rid in rids:
            if self.states.finish(rid) and self.table.role_of(rid) != Role.TRAIN:
                joining.setdefault(self.table.role_of(rid), []).append(rid)
        for role, ups in joining.items():
            self.host.migrate_on(role, ups)

    def bring_up(self, rids: Iterable[int]) -> None:
        """Start with `rids` up, at no cost (the simulator's initial placement); every inference
        role's scheduler then takes its replicas."""
        rids = list(rids)
        for rid in rids:
            self.states.start(rid, up=True)
            self.states.finish(rid)
        for role in INFERENCE_ROLES:
            self.host.migrate_on(role, [rid for rid in rids if self.table.role_of(rid) == role])
