"""Cluster spec, role slots and process groups.

The spec comes from torchrun's environment; torchrun numbers ranks host by host, so a host is
`rank // local_world_size`. Every role's replica slots are tiled over hosts: a replica stays
inside one host unless its TP size is larger than a host, then it spans whole hosts. The
training pool is the last `train.devices` ranks (rank 0 also runs the controller, so it is
kept for inference where possible). One process group per slot, plus the training group, is
created once at start-up by every rank in the same order; a shift only changes which of them
a rank uses.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

ROLES = ("rollout", "reward", "train")


@dataclass(frozen=True)
class ClusterSpec:
    world_size: int
    rank: int
    local_world_size: int

    @classmethod
    def from_env(cls) -> ClusterSpec:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        return cls(
            world,
            int(os.environ.get("RANK", "0")),
            int(os.environ.get("LOCAL_WORLD_SIZE", str(world))),
        )

    @property
    def nnodes(self) -> int:
        return self.world_size // self.local_world_size

    def host_of(self, rank: int) -> int:
        return rank // self.local_world_size

    @property
    def host(self) -> int:
        return self.host_of(self.rank)

    @property
    def local_rank(self) -> int:
        return self.rank % self.local_world_size


@dataclass(frozen=True)
class Slot:
    """A place a replica (or the trainer) can occupy: a role and the ranks it spans."""

    role: str
    index: int
    ranks: tuple[int, ...]

    @property
    def leader(self) -> int:
        return self.ranks[0]

    @property
    def name(self) -> str:
        return f"{self.role}{self.index}"


def tile_slots(role: str, tp: int, spec: ClusterSpec) -> list[Slot]:
    """Every replica slot of a role with TP size `tp`, tiled host by host."""
    per_host = spec.local_world_size
    if tp <= per_host:
        starts = [h * per_host + k * tp for h in range(spec.nnodes) for k in range(per_host // tp)]
    else:
        starts = list(range(0, spec.world_size - tp + 1, tp))
    return [Slot(role, i, tuple(range(s, s + tp))) for i, s in enumerate(starts)]


def train_slot(devices: int, spec: ClusterSpec) -> Slot:
    return Slot("train", 0, tuple(range(spec.world_size - devices, spec.world_size)))


@dataclass
class SlotTable:
    """All slots of the job; `groups[slot.name]` is that slot's process group (None before init)."""

    rollout: list[Slot]
    reward: list[Slot]
    train: Slot

    @classmethod
    def build(
        cls, spec: ClusterSpec, rollout_tp: int, reward_tp: int, train_devices: int
    ) -> SlotTable:
        return cls(
            tile_slots("rollout", rollout_tp, spec),
            tile_slots("reward", reward_tp, spec),
            train_slot(train_devices, spec),
        )

    def all(self) -> list[Slot]:
        return [*self.rollout, *self.reward, self.train]

    def of(self, role: str) -> list[Slot]:
        return {"rollout": self.rollout, "reward": self.reward, "train": [self.train]}[role]

    def get(self, role: str, index: int) -> Slot:
        return self.of(role)[index]


def pool_sizes(world: int, per_node: int, smallest: int) -> list[int]:
    """Every size the training pool may take: at least `smallest` (one rollout replica's
    devices), less than the world, and part of one node or whole nodes."""
    return [t for t in range(smallest, world) if t < per_node or t % per_node == 0]


def train_group_name(ranks: tuple[int, ...]) -> str:
    """The key of a training slot's group on `ranks` in `create_groups`' dict."""
    return f"train{list(ranks)}"


def create_groups(table: SlotTable, train_sizes: list[int] | None = None) -> dict[str, object]:
    """One process group per slot, created collectively in a fixed order (torch requires it: a
    group made later by its members alone would need the same order on them too); beside each
    multi-rank inference slot's, a gloo group under `fence_name(slot)` when the default backend
    is not gloo: its barrier touches no device (`InferenceRole.shift_down`). `train_sizes`: the
    sizes a re-sized training slot may take (its last ranks), each group under
    `train_group_name` (the training slot's own is there too)."""
    import torch.distributed as dist

    cpu = dist.get_backend() != "gloo"
    groups: dict[str, object] = {}
    for slot in table.all():
        if slot.ranks:
            groups[slot.name] = dist.new_group(list(slot.ranks))
            if slot.role != "train" and len(slot.ranks) > 1:
                groups[fence_name(slot)] = (
                    dist.new_group(list(slot.ranks), backend="gloo") if cpu else groups[slot.name]
                )
    if table.train.ranks:
        groups[train_group_name(table.train.ranks)] = groups[table.train.name]
    world = 1 + max(r for slot in table.all() for r in slot.ranks)
    for size in train_sizes or []:
        ranks = tuple(range(world - size, world))
        if train_group_name(ranks) not in groups:
            groups[train_group_name(ranks)] = dist.new_group(list(ranks))
    return groups


def fence_name(slot: Slot) -> str:
    """The key of a slot's device-free group in `create_groups`' dict."""
    return f"{slot.name}/fence"


def describe(spec: ClusterSpec, table: SlotTable) -> str:
    lines = [
        f"cluster: {spec.nnodes} host(s) x {spec.local_world_size} device(s) = {spec.world_size} ranks"
    ]
    for role in ROLES:
        slots = table.of(role)
        shown = ", ".join(f"{s.name}={list(s.ranks)}" for s in slots[:8]) + (
            " ..." if len(slots) > 8 else ""
        )
        lines.append(f"  {role:8s} {len(slots)} slot(s): {shown}")
    return "\n".join(lines)
