"""Layouts: which contiguous box of each tensor lives on which place (host memory or a device).

Pure Python. A layout partitions every tensor into disjoint boxes (one per distinct shard); each
box lists all places holding a copy of it (replicas). GPS's own layouts are over hosts
(replication-first, or grouped when memory is short); callers' layouts are over ranks (DP x PP x TP
from the TP plan, or the trainer's FSDP dim-0 shards).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from pivot.gps.spec import TensorSpec
from pivot.model.tp_plan import fsdp_range, shard_range, split_view, tp_split

Box = tuple[tuple[int, int], ...]  # [start, stop) per dimension
HOST_MEMORY = -1


class Place(NamedTuple):
    """Where a copy lives: a host's memory (rank == HOST_MEMORY) or a rank's device.

    A NamedTuple, not a dataclass, because planning hashes and compares millions of these.
    """

    host: int
    rank: int = HOST_MEMORY


@dataclass(frozen=True)
class Piece:
    """One box of a tensor and every place that holds it."""

    box: Box
    holders: tuple[Place, ...]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(b - a for a, b in self.box)


@dataclass(frozen=True)
class Parallelism:
    """How a layout was built; part of the plan-cache signature."""

    kind: str  # "replicated" | "grouped" | "parallel" | "fsdp"
    dp: int = 1
    tp: int = 1
    pp: int = 1
    group: int = 1  # GPS replication-group size k


@dataclass(frozen=True, eq=False)
class Layout:
    """A model partitioned over places. `pieces[name]` partitions tensor `name` into disjoint boxes."""

    model: str
    specs: tuple[TensorSpec, ...]
    pieces: Mapping[str, tuple[Piece, ...]]
    parallelism: Parallelism
    places: tuple[Place, ...]
    signature: tuple = field(init=False)

    def __post_init__(self) -> None:
        for spec in self.specs:
            got = self.pieces.get(spec.name)
            if got is None:
                raise ValueError(
                    f"model {self.model!r}: layout does not cover tensor {spec.name!r}"
                )
            covered = sum(math.prod(b - a for a, b in p.box) for p in got)
            bad = [
                p.box
                for p in got
                if len(p.box) != len(spec.shape)
                or any(not 0 <= a <= b <= n for (a, b), n in zip(p.box, spec.shape))
            ]
            if bad or covered != spec.numel or any(not p.holders for p in got):
                raise ValueError(
                    f"model {self.model!r}: layout does not cover tensor {spec.name!r} "
                    f"{spec.shape} exactly once (boxes {[p.box for p in got]})"
                )
        extra = set(self.pieces) - {s.name for s in self.specs}
        if extra:
            raise ValueError(
                f"model {self.model!r}: layout names unknown tensors {sorted(extra)[:3]}"
            )
        digest = hashlib.sha1(
            repr([(s.name, s.shape, s.dtype) for s in self.specs]).encode()
        ).hexdigest()
        object.__setattr__(self, "signature", (self.model, digest, self.places, self.parallelism))

    def spec(self, name: str) -> TensorSpec:
        return self._spec_map[name]

    @property
    def _spec_map(self) -> dict[str, TensorSpec]:
        cached = self.__dict__.get("_specs_by_name")
        if cached is None:
            cached = {s.name: s for s in self.specs}
            object.__setattr__(self, "_specs_by_name", cached)
        return cached

    def held_by(self, place: Place) -> list[tuple[str, int, Piece]]:
        """(tensor, piece index, piece) for every piece `place` holds, in spec order."""
        return [
            (s.name, i, p)
            for s in self.specs
            for i, p in enumerate(self.pieces[s.name])
            if place in p.holders
        ]

    def packing(self, place: Place, align: int = 64) -> tuple[dict[tuple[str, int], int], int]:
        """Byte offsets of `place`'s pieces packed back to back (aligned), and the total size."""
        offsets: dict[tuple[str, int], int] = {}
        size = 0
        for name, i, piece in self.held_by(place):
            offsets[(name, i)] = size
            nbytes = math.prod(piece.shape) * self.spec(name).itemsize
            size += -(-nbytes // align) * align
        return offsets, size


def split_views(specs: Sequence[TensorSpec]) -> list[TensorSpec]:
    """`specs` with each tensor in its `tp_plan.split_view` (same bytes), the shape GPS stores
    and plans in: a fused experts' gate_up_proj [E, 2I, H] becomes [E, 2, I, H], so a TP rank's
    share (a slice of the gate half and of the up half) is one box. Tensors cross GPS's boundary
    reshaped (`pivot.runtime.weights.service`); every other tensor is unchanged."""
    return [
        s if (v := split_view(s.name, s.shape)) == s.shape else TensorSpec(s.name, v, s.dtype)
        for s in specs
    ]


def full_box(shape: Sequence[int]) -> Box:
    return tuple((0, n) for n in shape)


def _split(shape: tuple[int, ...], dim: int, lo: int, hi: int) -> Box:
    return tuple((lo, hi) if d == dim else (0, n) for d, n in enumerate(shape))


def replicated_layout(model: str, specs: Sequence[TensorSpec], hosts: Sequence[int]) -> Layout:
    """GPS replication-first: every host holds a full copy."""
    holders = tuple(Place(h) for h in hosts)
    pieces = {s.name: (Piece(full_box(s.shape), holders),) for s in specs}
    return Layout(model, tuple(specs), pieces, Parallelism("replicated"), holders)


def grouped_layout(model: str, specs: Sequence[TensorSpec], hosts: Sequence[int], k: int) -> Layout:
    """GPS fallback: hosts form groups of k; each group shards every tensor on dim 0 (member j
    holds chunk j), groups replicate each other."""
    if k < 1 or len(hosts) % k:
        raise ValueError(f"model {model!r}: group size {k} must divide the {len(hosts)} hosts")
    if k == 1:
        return replicated_layout(model, specs, hosts)
    columns = [tuple(Place(h) for h in hosts[j::k]) for j in range(k)]
    pieces: dict[str, tuple[Piece, ...]] = {}
    for s in specs:
        if not s.shape:
            pieces[s.name] = (Piece((), columns[0]),)
            continue
        chunks = [(j, fsdp_range(s.shape[0], j, k)) for j in range(k)]
        pieces[s.name] = tuple(
            Piece(_split(s.shape, 0, lo, hi), columns[j])
            for j, (lo, hi) in chunks
            if hi > lo or (s.shape[0] == 0 and j == 0)
        )
    return Layout(
        model, tuple(specs), pieces, Parallelism("grouped", group=k), tuple(Place(h) for h in hosts)
    )


def _host_share(specs: Sequence[TensorSpec], k: int) -> tuple[int, str]:
    """Largest per-host byte share under group size k, and the tensor with the largest share."""
    per_member = [0] * k
    worst = ("", 0)
    for s in specs:
        rows = s.shape[0] if s.shape else 1
        row_bytes = s.nbytes // rows if rows else 0
        for j in range(k):
            lo, hi = fsdp_range(rows, j, k) if s.shape else ((0, 1) if j == 0 else (0, 0))
            per_member[j] += (hi - lo) * row_bytes
            if (hi - lo) * row_bytes > worst[1]:
                worst = (s.name, (hi - lo) * row_bytes)
    return max(per_member), worst[0]


def gps_host_bytes(models: Mapping[str, Sequence[TensorSpec]], k: int, buffers: int = 2) -> int:
    """Largest per-host bytes of all models under group size k, `buffers` copies of each."""
    return sum(buffers * _host_share(specs, k)[0] for specs in models.values())


def gps_group_size(
    models: Mapping[str, Sequence[TensorSpec]], hosts: int, budget_bytes: int, buffers: int = 2
) -> tuple[int, int]:
    """The smallest group size k (dividing the host count) whose per-host share of all models
    fits the budget, and that share in bytes (`buffers` copies of each model: double buffering)."""
    for k in (k for k in range(1, hosts + 1) if hosts % k == 0):
        need = gps_host_bytes(models, k, buffers)
        if need <= budget_bytes:
            return k, need
    name, specs = next((n, s) for n, s in models.items() if s)
    raise ValueError(
        f"GPS host-memory budget {budget_bytes} B is too small even with group size k={hosts}: "
        f"needs {need} B per host (model {name!r}, largest shard tensor {_host_share(specs, hosts)[1]!r})"
    )


def gps_layouts(
    models: Mapping[str, Sequence[TensorSpec]],
    hosts: Sequence[int],
    budget_bytes: int,
    buffers: int = 2,
) -> dict[str, Layout]:
    """GPS layouts for all models together: full replication if it fits the per-host budget,
    else the smallest group size k whose share fits (`gps_group_size`)."""
    k, _ = gps_group_size(models, len(hosts), budget_bytes, buffers)
    return {name: grouped_layout(name, specs, hosts, k) for name, specs in models.items()}


def parallel_layout(
    model: str,
    specs: Sequence[TensorSpec],
    ranks: Sequence[int],
    host_of: Mapping[int, int] | Sequence[int],
    dp: int = 1,
    tp: int = 1,
    pp: int = 1,
) -> Layout:
    """A DP x PP x TP layout over `ranks` (index = (d * pp + p) * tp + t). Decoder layers split
    into pp contiguous stages; embeddings go to the first stage, final norm and lm_head to the last."""
    if dp * tp * pp != len(ranks):
        raise ValueError(f"model {model!r}: dp*pp*tp = {dp * tp * pp} != {len(ranks)} ranks")
    layers = 1 + max(
        (int(s.name.split(".")[2]) for s in specs if s.name.startswith("model.layers.")), default=-1
    )

    def stage(name: str) -> int:
        if name.startswith("model.layers."):
            return int(name.split(".")[2]) * pp // max(layers, 1)
        return pp - 1 if name in ("model.norm.weight", "lm_head.weight") else 0

    grid = [Place(host_of[r], r) for r in ranks]
    # holder tuples are shared between tensors: planning indexes them by identity-fast dict lookups
    whole = [
        tuple(grid[(d * pp + p) * tp + t] for d in range(dp) for t in range(tp)) for p in range(pp)
    ]
    column = [
        [tuple(grid[(d * pp + p) * tp + t] for d in range(dp)) for t in range(tp)]
        for p in range(pp)
    ]
    memo: dict[tuple, tuple[Piece, ...]] = {}
    pieces: dict[str, tuple[Piece, ...]] = {}
    for s in specs:
        p = stage(s.name)
        split = tp_split(s.name)
        if split_view(s.name, s.shape) != s.shape:
            raise ValueError(
                f"model {model!r}: tensor {s.name!r} {s.shape} is not in its split view "
                f"{split_view(s.name, s.shape)} (build layouts over `split_views(specs)`)"
            )
        dim = split.dim  # None for Split.REPLICATE only
        if dim is None or tp == 1 or dim >= len(s.shape):
            pieces[s.name] = (Piece(full_box(s.shape), whole[p]),)
            continue
        key = (s.shape, dim, p)
        if key not in memo:
            try:
                ranges = [shard_range(s.shape[dim], t, tp) for t in range(tp)]
            except ValueError as err:
                raise ValueError(f"model {model!r}: tensor {s.name!r}: {err}") from None
            memo[key] = tuple(
                Piece(_split(s.shape, dim, lo, hi), column[p][t])
                for t, (lo, hi) in enumerate(ranges)
            )
        pieces[s.name] = memo[key]
    return Layout(
        model, tuple(specs), pieces, Parallelism("parallel", dp=dp, tp=tp, pp=pp), tuple(grid)
    )


def fsdp_layout(
    model: str,
    specs: Sequence[TensorSpec],
    ranks: Sequence[int],
    host_of: Mapping[int, int] | Sequence[int],
) -> Layout:
    """The trainer's FSDP2 layout: every tensor chunked on dim 0 over `ranks` (torch.chunk sizes)."""
    places = tuple(Place(host_of[r], r) for r in ranks)
    w = len(ranks)
    pieces: dict[str, tuple[Piece, ...]] = {}
    for s in specs:
        if not s.shape or s.shape[0] == 0:
            pieces[s.name] = (Piece(full_box(s.shape), (places[0],)),)
            continue
        chunks = [(i, fsdp_range(s.shape[0], i, w)) for i in range(w)]
        pieces[s.name] = tuple(
            Piece(_split(s.shape, 0, lo, hi), (places[i],)) for i, (lo, hi) in chunks if hi > lo
        )
    return Layout(model, tuple(specs), pieces, Parallelism("fsdp", dp=w), places)
