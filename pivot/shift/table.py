"""The cluster's replica table and the state of each replica.

`ReplicaTable` numbers every slot of `pivot.dist.SlotTable` (the one tiling of the cluster) as a
scheduler `Replica`: rollout slots 0..R-1, reward slots R..R+M-1, then the training slot, which
holds the whole training pool because training shifts as a whole. The runtime and the simulator
build it the same way and differ only in what a replica's KV capacity and throughput model are.

`ReplicaStates` tracks where each replica is in its shift cycle

    down --start up--> going_up --finish--> up --start down--> going_down --finish--> down

and which replica holds each device: a replica may start up only on devices that are free or
held by a replica going down (its shift down is queued ahead of the shift up on those devices).
Anything else raises `ShiftError` naming the replica, its state and the device.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field

from pivot.dist import SlotTable
from pivot.sched.records import Replica, Role
from pivot.sched.throughput import ThroughputModel


class ShiftError(RuntimeError):
    """An illegal shift: a transition the state machine does not have, or a device conflict."""


class State(enum.StrEnum):
    DOWN = "down"
    GOING_UP = "going_up"
    UP = "up"
    GOING_DOWN = "going_down"


@dataclass(frozen=True)
class ReplicaTable:
    """Every replica slot of the cluster, indexed by replica id."""

    world: int
    """Devices in the cluster, numbered 0..world-1."""
    replicas: tuple[Replica, ...]
    slot_index: tuple[int, ...]
    """Each replica's index among its role's slots (the `slot` of the control messages)."""
    train_rid: int
    """Id of the training slot; equal to `len(replicas)` when the job has no training pool."""
    _rids: dict[tuple[str, int], int] = field(init=False, repr=False, compare=False)

    @classmethod
    def build(
        cls,
        slots: SlotTable,
        world: int,
        kv_capacity: Mapping[str, int],
        models: Mapping[str, ThroughputModel],
    ) -> ReplicaTable:
        """Replicas of `slots`; `kv_capacity` and `models` give each inference role's KV tokens and
        throughput model."""
        reps: list[Replica] = []
        index: list[int] = []
        for role in (Role.ROLLOUT, Role.REWARD):
            for s in slots.of(role):
                reps.append(Replica(len(reps), role, s.ranks, kv_capacity[role], models[role]))
                index.append(s.index)
        train_rid = len(reps)
        if slots.train.ranks:
            reps.append(Replica(train_rid, Role.TRAIN, slots.train.ranks))
            index.append(slots.train.index)
        return cls(world, tuple(reps), tuple(index), train_rid)

    def __post_init__(self) -> None:
        ids = [r.replica_id for r in self.replicas]
        if ids != list(range(len(ids))):
            raise ValueError(
                f"ReplicaTable.replicas: ids must be 0..{len(ids) - 1} in order, got {ids}"
            )
        if len(self.slot_index) != len(ids):
            raise ValueError(
                f"ReplicaTable.slot_index: {len(self.slot_index)} entries for {len(ids)} replicas"
            )
        for r in self.replicas:
            if not all(0 <= d < self.world for d in r.devices):
                raise ValueError(
                    f"ReplicaTable: replica {r.replica_id} devices {r.devices} outside 0..{self.world - 1}"
                )
        object.__setattr__(
            self, "_rids", {self.slot_of(r.replica_id): r.replica_id for r in self.replicas}
        )

    def role_of(self, rid: int) -> str:
        return str(self.replicas[rid].role)

    def slot_of(self, rid: int) -> tuple[str, int]:
        """(role, slot index) of replica `rid`, as the control messages name it."""
        return self.role_of(rid), self.slot_index[rid]

    def rid(self, role: str, index: int) -> int:
        """Replica id of slot `index` of `role`."""
        return self._rids[(str(role), index)]

    def slots(self, role: str) -> list[Replica]:
        """Every slot of `role`, in tiling order."""
        return [r for r in self.replicas if r.role == role]

    def name(self, rid: int) -> str:
        role, index = self.slot_of(rid)
        return f"{role}{index} (replica {rid})"


@dataclass
class ReplicaStates:
    """The state of every replica of `table` (all start down) and the devices' holders."""

    table: ReplicaTable
    state: dict[int, State] = field(init=False)
    holder: dict[int, int] = field(init=False, default_factory=dict)
    """device -> the replica that holds or is taking it (not down)."""
    in_flight: int = field(init=False, default=0)
    """Replicas shifting now (up or down)."""

    def __post_init__(self) -> None:
        self.state = {r.replica_id: State.DOWN for r in self.table.replicas}

    def __getitem__(self, rid: int) -> State:
        return self.state[rid]

    def check_start(self, rid: int, up: bool, leaving: frozenset[int] = frozenset()) -> None:
        """Raise `ShiftError` unless `rid` may start shifting up (`up`) or down now; a shift up
        may take devices of the replicas in `leaving` (they start down first)."""
        if rid not in self.state:
            raise ShiftError(f"replica {rid}: not in the table (ids 0..{len(self.state) - 1})")
        want = State.DOWN if up else State.UP
        if self.state[rid] != want:
            verb = "up" if up else "down"
            raise ShiftError(
                f"{self.table.name(rid)}: cannot shift {verb} while {self.state[rid]} (needs {want})"
            )
        if up:
            for d in self.table.replicas[rid].devices:
                other = self.holder.get(d)
                if (
                    other is not None
                    and self.state[other] != State.GOING_DOWN
                    and other not in leaving
                ):
                    raise ShiftError(
                        f"{self.table.name(rid)}: cannot shift up, device {d} is held by "
                        f"{self.table.name(other)} ({self.state[other]})"
                    )

    def start(self, rid: int, up: bool) -> None:
        self.check_start(rid, up)
        self.state[rid] = State.GOING_UP if up else State.GOING_DOWN
        self.in_flight += 1
        if up:
            for d in self.table.replicas[rid].devices:
                self.holder[d] = rid

    def finish(self, rid: int) -> bool:
        """Complete `rid`'s shift in flight; returns whether it was a shift up."""
        current = self.state.get(rid)
        if current not in (State.GOING_UP, State.GOING_DOWN):
            raise ShiftError(f"replica {rid}: no shift in flight to finish (state {current})")
        up = current == State.GOING_UP
        self.state[rid] = State.UP if up else State.DOWN
        self.in_flight -= 1
        if not up:
            for d in self.table.replicas[rid].devices:
                if self.holder.get(d) == rid:
                    del self.holder[d]
        return up

    def resize(self, rid: int, devices: tuple[int, ...]) -> None:
        """Give replica `rid` `devices` (the training slot re-sized): only while it is down and
        nothing shifts, so no device changes holder; every other replica keeps its id, devices
        and state. The table is replaced here, its one place. Raises `ShiftError` otherwise."""
        if self.in_flight or self.state[rid] != State.DOWN:
            raise ShiftError(
                f"{self.table.name(rid)}: cannot be re-sized while {self.state[rid]} "
                f"with {self.in_flight} shift(s) in flight (needs down, none)"
            )
        replicas = list(self.table.replicas)
        replicas[rid] = dataclasses.replace(replicas[rid], devices=devices)
        self.table = dataclasses.replace(self.table, replicas=tuple(replicas))

    def up(self) -> list[int]:
        """Replica ids whose shift up has completed and that are not shifting down."""
        return [rid for rid, s in self.state.items() if s == State.UP]

    def devices_per_role(self) -> dict[str, int]:
        """Devices of the up replicas of each role."""
        out = {str(role): 0 for role in Role}
        for rid in self.up():
            out[self.table.role_of(rid)] += len(self.table.replicas[rid].devices)
        return out
