"""`ClusterSnapshot`: the planner's whole input, built by the runtime's monitor or the simulator.

It lists every replica *slot* of every role (rollout and reward slots with their devices,
KV capacity and throughput model; training as one slot of role "train" over its pool), which
slots are up now, the sequences running on each up slot, each inference role's waiting queue,
whether the next training batch is ready, the trainer's current token rate and the measured
duration of each role's shifts.

Construction validates consistency and raises `ValueError` naming the item: a device held by
two up replicas, two slots of one role overlapping, a sequence on two replicas (or queued and
running), a negative length, sequences on a replica that is not up, unknown ids.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pivot.sched.records import INFERENCE_ROLES, Replica, Role, SeqState
from pivot.sched.scheduler import ShiftAwareScheduler


@dataclass(frozen=True)
class ClusterSnapshot:
    replicas: tuple[Replica, ...]
    """Every slot of every role; at most one slot of role "train" (its devices = the training pool)."""
    active: frozenset[int]
    """Ids of the slots that are up now."""
    running: Mapping[int, tuple[SeqState, ...]] = field(default_factory=dict)
    """Sequences running on each up rollout/reward replica."""
    queues: Mapping[str, tuple[SeqState, ...]] = field(default_factory=dict)
    """Waiting queue of each inference role ("rollout", "reward")."""
    train_batch_ready: bool = False
    train_throughput: float = 0.0
    """Tokens/s the trainer processes now (0 when idle): its penalty if shifted down."""
    devices: tuple[int, ...] | None = None
    """All devices of the cluster; default: the union of the slots' devices."""
    shift_s: Mapping[str, float] = field(default_factory=dict)
    """Measured tau_shift of each role brought up so far: mean seconds from the start of a plan
    that shifted replicas down for it to its last completed shift (pivot/shift/timing.py); the
    planner uses `planner.tau_shift_s` for a role not measured yet."""

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "replicas", tuple(sorted(self.replicas, key=lambda r: r.replica_id))
        )
        object.__setattr__(self, "active", frozenset(self.active))
        self._validate()

    # ---------------------------------------------------------------- derived views
    @property
    def by_id(self) -> dict[int, Replica]:
        return {r.replica_id: r for r in self.replicas}

    @property
    def train_slot(self) -> Replica | None:
        return next((r for r in self.replicas if r.role == Role.TRAIN), None)

    @property
    def train_active(self) -> bool:
        slot = self.train_slot
        return slot is not None and slot.replica_id in self.active

    def slots(self, role: str) -> list[Replica]:
        return [r for r in self.replicas if r.role == role]

    def replica_size(self, role: str) -> int:
        """Devices per replica of `role` (0 if the role has no slot)."""
        sizes = {len(r.devices) for r in self.slots(role)}
        return max(sizes, default=0)

    def holders(self) -> dict[int, int]:
        """Device -> id of the up slot holding it (free devices are absent)."""
        out: dict[int, int] = {}
        for r in self.replicas:
            if r.replica_id in self.active:
                for d in r.devices:
                    out[d] = r.replica_id
        return out

    def device_roles(self) -> dict[int, tuple[Role, int] | None]:
        """Every device -> (role, replica id) it serves, or None when idle."""
        by_id, held = self.by_id, self.holders()
        every = (
            self.devices
            if self.devices is not None
            else sorted({d for r in self.replicas for d in r.devices})
        )
        return {d: ((by_id[held[d]].role, held[d]) if d in held else None) for d in every}

    def scheduler(
        self, role: str, priority: Callable[[SeqState], object] | None = None, migrate: bool = True
    ) -> ShiftAwareScheduler:
        """A scheduler mirroring `role`'s current state (running placed, queue enqueued)."""
        slots = self.slots(role)
        sched = ShiftAwareScheduler(
            slots,
            active=[r.replica_id for r in slots if r.replica_id in self.active],
            priority=priority,
            migrate=migrate,
        )
        running = {
            r.replica_id: self.running[r.replica_id]
            for r in slots
            if self.running.get(r.replica_id)
        }
        sched.load_state(running, self.queues.get(role, ()))
        return sched

    # ---------------------------------------------------------------- validation
    def _validate(self) -> None:
        ids = [r.replica_id for r in self.replicas]
        dup = {i for i in ids if ids.count(i) > 1}
        if dup:
            raise ValueError(f"ClusterSnapshot: replica ids {sorted(dup)} appear twice")
        by_id = self.by_id
        if len(self.slots(Role.TRAIN)) > 1:
            raise ValueError("ClusterSnapshot: more than one training slot")
        unknown = sorted(self.active - set(by_id))
        if unknown:
            raise ValueError(f"ClusterSnapshot: active replicas {unknown} are not slots")
        if self.devices is not None:
            every = set(self.devices)
            for r in self.replicas:
                extra = sorted(set(r.devices) - every)
                if extra:
                    raise ValueError(
                        f"ClusterSnapshot: replica {r.replica_id} uses unknown devices {extra}"
                    )
        for kind in Role:
            owner: dict[int, int] = {}
            for r in self.slots(kind):
                for d in r.devices:
                    if d in owner:
                        raise ValueError(
                            f"ClusterSnapshot: {kind} slots {owner[d]} and {r.replica_id} overlap on device {d}"
                        )
                    owner[d] = r.replica_id
        held: dict[int, int] = {}
        for r in self.replicas:
            if r.replica_id not in self.active:
                continue
            for d in r.devices:
                if d in held:
                    raise ValueError(
                        f"ClusterSnapshot: device {d} is in two replicas ({held[d]} and {r.replica_id})"
                    )
                held[d] = r.replica_id
        for rid in sorted(self.running):
            if rid not in by_id or by_id[rid].role not in INFERENCE_ROLES:
                raise ValueError(
                    f"ClusterSnapshot: sequences on replica {rid}, which is not a rollout/reward slot"
                )
            if rid not in self.active and self.running[rid]:
                raise ValueError(f"ClusterSnapshot: sequences on replica {rid}, which is not up")
        for role in sorted(self.queues):
            if role not in INFERENCE_ROLES:
                raise ValueError(f"ClusterSnapshot: queue of unknown role {role!r}")
        groups = [*(self.running[rid] for rid in sorted(self.running))]
        groups += [self.queues[role] for role in sorted(self.queues)]
        ids = [seq.seq_id for group in groups for seq in group]
        # A SeqState checks its lengths when built, but its fields stay writable.
        bad_len = [s for group in groups for s in group if s.prompt_len < 0 or s.generated < 0]
        if bad_len or len(set(ids)) != len(ids):  # the planner's hot path checks in bulk
            self._locate_bad_sequence()
        for role, tau in self.shift_s.items():
            if role not in tuple(Role) or not 0 <= tau < float("inf"):
                raise ValueError(
                    f"ClusterSnapshot: shift_s[{role!r}] = {tau!r}: need a role and a finite time >= 0"
                )
        if not self.train_throughput >= 0:
            raise ValueError(
                f"ClusterSnapshot: train_throughput must be >= 0, got {self.train_throughput}"
            )

    def _locate_bad_sequence(self) -> None:
        """Raise the first sequence error, naming where: `_validate` found one in bulk."""
        seen: dict[int, str] = {}
        places = [(f"replica {rid}", self.running[rid]) for rid in sorted(self.running)]
        places += [(f"{role} queue", self.queues[role]) for role in sorted(self.queues)]
        for where, group in places:
            for seq in group:
                if seq.prompt_len < 0 or seq.generated < 0:
                    raise ValueError(
                        f"ClusterSnapshot: sequence {seq.seq_id} has a negative length ({where})"
                    )
                if seq.seq_id in seen:
                    raise ValueError(
                        f"ClusterSnapshot: sequence {seq.seq_id} is on two replicas ({seen[seq.seq_id]} and {where})"
                    )
                seen[seq.seq_id] = where
