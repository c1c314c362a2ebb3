"""Contiguous element runs of a box inside a row-major container; pure Python.

A remote transfer moves one atomic slice as a list of (offset, length) descriptors; the slice is
contiguous on neither side in general (a row-parallel slice of a full weight is one run per row).
"""

from __future__ import annotations

import itertools
import math

from pivot.gps.layout import Box


def runs(container: tuple[int, ...], box: Box) -> list[tuple[int, int]]:
    """(element offset, element count) of `box` (relative to the container's origin), row-major."""
    if not container:
        return [(0, 1)]
    extents = [hi - lo for lo, hi in box]
    if any(e <= 0 for e in extents):
        return []
    strides = [math.prod(container[d + 1 :]) for d in range(len(container))]
    k = len(container) - 1  # innermost dim the run starts to be partial in
    while k > 0 and extents[k] == container[k]:
        k -= 1
    length = extents[k] * strides[k]
    base = sum(lo * st for (lo, _), st in zip(box, strides))
    outer = [range(e) for e in extents[:k]]
    return [
        (base + sum(i * st for i, st in zip(idx, strides)), length)
        for idx in itertools.product(*outer)
    ]


def paired_runs(
    src: list[tuple[int, int]], dst: list[tuple[int, int]]
) -> list[tuple[int, int, int]]:
    """Cut two run lists over the same element sequence at every break of either: (src, dst, n)."""
    out: list[tuple[int, int, int]] = []
    i = j = 0
    so, sn = src[0] if src else (0, 0)
    do, dn = dst[0] if dst else (0, 0)
    while i < len(src) and j < len(dst):
        n = min(sn, dn)
        out.append((so, do, n))
        so, sn, do, dn = so + n, sn - n, do + n, dn - n
        if sn == 0:
            i += 1
            if i < len(src):
                so, sn = src[i]
        if dn == 0:
            j += 1
            if j < len(dst):
                do, dn = dst[j]
    return out
