"""Common refinement of two layouts into atomic slices, indivisible on both sides.

Pure Python. Each atomic slice is the intersection of one source piece and one destination
piece, so every transfer moves a whole slice: nothing is split or concatenated in flight.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from pivot.gps.layout import Box, Layout, Place


class AtomicSlice(NamedTuple):
    """Box `box` of tensor `tensor`; it lies inside source piece `src_piece` and destination
    piece `dst_piece` of that tensor. A NamedTuple: plans create one per slice, fast."""

    tensor: str
    box: Box
    nbytes: int
    src_piece: int
    dst_piece: int
    holders: tuple[Place, ...]
    receivers: tuple[Place, ...]


def intersect(a: Box, b: Box) -> Box | None:
    out = tuple((max(a0, b0), min(a1, b1)) for (a0, a1), (b0, b1) in zip(a, b))
    return out if all(lo < hi for lo, hi in out) else None


def refine(src: Layout, dst: Layout) -> list[AtomicSlice]:
    """Atomic slices of `src` x `dst`, tensor by tensor in spec order."""
    if src.model != dst.model or src.signature[1] != dst.signature[1]:
        raise ValueError(
            f"refine: layouts describe different models or tensor lists "
            f"({src.model!r} vs {dst.model!r})"
        )
    memo: dict[tuple[tuple[Box, ...], tuple[Box, ...]], list[tuple[int, int, Box]]] = {}
    out: list[AtomicSlice] = []
    for spec in src.specs:
        sp, dp = src.pieces[spec.name], dst.pieces[spec.name]
        if spec.numel == 0:
            continue
        key = (tuple(p.box for p in sp), tuple(p.box for p in dp))
        cuts = memo.get(key)
        if cuts is None:  # decoder layers repeat the same boxes: intersect each pattern once
            cuts = []
            for i, a in enumerate(key[0]):
                for j, b in enumerate(key[1]):
                    box = intersect(a, b)
                    if box is not None:
                        cuts.append((i, j, box))
            memo[key] = cuts
        item = spec.itemsize
        for i, j, box in cuts:
            out.append(
                AtomicSlice(
                    spec.name,
                    box,
                    math.prod(hi - lo for lo, hi in box) * item,
                    i,
                    j,
                    sp[i].holders,
                    dp[j].holders,
                )
            )
    return out
