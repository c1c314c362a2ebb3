"""The placement rule of Dispatch (paper §6, Algorithm 2), the one place it is written: a
sequence of length l goes to the target with free KV >= l and the largest
dT(l) = (N^seq + 1) / (A * (N^tok + l) + max(B, C * (N^seq + 1)) + D) - T_i; ties go to the
first target in ascending id; no target that fits means the sequence waits.

A target's dT is read from its dispatch terms (`throughput.load_terms`): n1 = N^seq + 1,
base = latency(N^seq + 1, N^tok), thr = T_i and free = capacity - N^tok, so that
dT(l) = n1 / (base + A * l) - thr. Two kernels of the rule, chosen by the callers by target
count, decide alike (the same IEEE operations in the same order, tests/sched/test_dispatch.py):

- `best_target`: a scan over tables indexed by replica (the scheduler's, a what-if run's).
- `TargetArrays(...).best`: numpy over compact copies of the targets' terms (many targets);
  argmax returns the first maximum, i.e. the smallest id, as the scan.

The callers own the rest of Dispatch: which queue entry is the head, and the bookkeeping of a
placement (ShiftAwareScheduler._dispatch, Trial._dispatch and the fused migration step).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np


def best_target(
    ln: int,
    targets: Sequence[int],
    A: Sequence[float],
    n1: Sequence[int],
    base: Sequence[float],
    thr: Sequence[float],
    free: Sequence[int],
) -> int:
    """The target (an index into the tables) a sequence of length `ln` goes to, or -1 if none
    of `targets` (ascending) has `free >= ln`."""
    best, best_gain = -1, -math.inf
    for r in targets:
        if free[r] >= ln:
            g = n1[r] / (base[r] + A[r] * ln) - thr[r]
            if g > best_gain:
                best, best_gain = r, g
    return best


class TargetArrays:
    """Compact numpy copies of the dispatch terms of `targets` (ascending indices into the
    tables), for the rule's numpy kernel. Whoever changes a target's load writes its new terms
    into the arrays too (`pos` maps an index to its slot); `free` stays the caller's table,
    read in place."""

    def __init__(
        self,
        targets: list[int],
        A: Sequence[float],
        n1: Sequence[int],
        base: Sequence[float],
        thr: Sequence[float],
        free: Sequence[int],
    ) -> None:
        self.targets, self.pos = targets, {r: j for j, r in enumerate(targets)}
        self.N1 = np.array([n1[i] for i in targets], dtype=np.float64)
        self.BASE = np.array([base[i] for i in targets], dtype=np.float64)
        self.THR = np.array([thr[i] for i in targets], dtype=np.float64)
        self.FREE = np.array([free[i] for i in targets], dtype=np.float64)
        self.buf = np.empty(len(targets), dtype=np.float64)
        self.sums = np.empty(len(targets), dtype=np.float64)
        self.shift = np.empty(
            (), dtype=np.float64
        )  # A*l as a 0-d array: cheaper to pass than a float
        a0 = A[targets[0]]
        # one A for all (the usual case): A*l is one product, the same one each target's would be
        self.one_A = a0 if all(A[i] == a0 for i in targets) else None
        self.A = (
            None if self.one_A is not None else np.array([A[i] for i in targets], dtype=np.float64)
        )
        self.best: Callable[[int], int] = self._kernel(free)
        """`best(ln)`: the target index for a sequence of length `ln`, or -1 (as `best_target`)."""

    def _kernel(self, free: Sequence[int]) -> Callable[[int], int]:
        """`best(ln)`: `best_target(ln, self.targets, ...)` in numpy. A closure: the arrays are
        bound once, not read as attributes per call; `free` is the caller's table (a list lookup
        of the winner's free KV costs less than reading the array)."""
        targets, N1, BASE, THR, FREE, buf, shift = (
            self.targets,
            self.N1,
            self.BASE,
            self.THR,
            self.FREE,
            self.buf,
            self.shift,
        )
        one_A, A = self.one_A, self.A
        add, mul, div, sub, argmax, inf = (
            np.add,
            np.multiply,
            np.divide,
            np.subtract,
            buf.argmax,
            -np.inf,
        )

        def best(ln: int) -> int:
            if one_A is not None:
                shift[()] = one_A * ln
                add(BASE, shift, out=buf)
            else:
                mul(A, ln, out=buf)  # type: ignore[arg-type]
                add(BASE, buf, out=buf)
            div(N1, buf, out=buf)
            sub(buf, THR, out=buf)
            j = argmax()  # the first maximum: the smallest id, as the scan
            i = targets[j]
            if free[i] < ln:  # the best does not fit: drop every target that cannot hold it
                buf[FREE < ln] = inf
                j = argmax()
                if buf[j] == inf:
                    return -1
                i = targets[j]
            return i

        return best

    def total(self) -> float:
        """Σ T_i over the targets in ascending id, added one by one like `sum` (3.11)."""
        return float(np.add.accumulate(self.THR, out=self.sums)[-1])
