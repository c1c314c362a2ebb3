"""`TrialLoads`: the replica loads of one what-if run (pivot/sched/trial.py) and their one
update. The load is n and tok per replica; T_i (`thr`) and the placement rule's terms (`n1`,
`base`, `free`) follow from it by `throughput.load_terms`, as in the scheduler's `ReplicaLoad`.
`refresh(i)` recomputes them after replica i's load changed, counts the change in `ver[i]` (a
migration's heap keys go stale by it) and, while `arrays` is set, writes them into the numpy
copies of the targets' terms too (`dispatch.TargetArrays`: one set for all steps of a
migration). `total` is the ordered Σ T_i that decides a migration step; `undo` puts a rejected
step's loads back (T_i is a function of the load).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

from pivot.sched.dispatch import TargetArrays
from pivot.sched.replica_load import ReplicaLoad
from pivot.sched.throughput import load_terms

_SEQUENTIAL_SUM = sys.version_info < (3, 12)  # `sum` of floats adds one by one (3.12 compensates)

Touched = dict[int, tuple[int, int, float]]
"""Replica index -> its (n, tok, T_i) before a migration step: what undoing the step restores."""


class TrialLoads:
    """Per-replica tables, indexed like the trial's replicas (ascending id): the constants A, B,
    C, D and KV capacity `cap` (shared by every copy: they never change) and the load with its
    derived terms (each copy's own)."""

    __slots__ = (
        "A",
        "B",
        "C",
        "D",
        "cap",
        "n",
        "tok",
        "thr",
        "n1",
        "base",
        "free",
        "ver",
        "arrays",
        "refresh",
    )

    def __init__(self, reps: Sequence[ReplicaLoad]) -> None:
        """The loads of the scheduler's `reps` (ascending id), frozen: each run takes a `copy`."""
        self.A = [r.A for r in reps]
        self.B = [r.B for r in reps]
        self.C = [r.C for r in reps]
        self.D = [r.D for r in reps]
        self.cap = [r.cap for r in reps]
        self.n = [r.n for r in reps]
        self.tok = [r.tok for r in reps]
        self.thr = [r.thr for r in reps]
        self.n1 = [r.n1 for r in reps]
        self.base = [r.base for r in reps]
        self.free = [r.free for r in reps]
        self.ver = [0] * len(reps)
        self.arrays: TargetArrays | None = None
        """The numpy copies `refresh` keeps in sync (during a migration of many targets)."""
        self.refresh: Callable[[int], None] = self._refresher(None)
        """`refresh(i)`, to call after replica `i`'s load (n, tok) changed."""

    def copy(self) -> TrialLoads:
        """Loads of their own for one run (the constants shared), without arrays."""
        new = TrialLoads.__new__(TrialLoads)
        new.A, new.B, new.C, new.D, new.cap = self.A, self.B, self.C, self.D, self.cap
        new.n, new.tok, new.thr = self.n[:], self.tok[:], self.thr[:]
        new.n1, new.base, new.free = self.n1[:], self.base[:], self.free[:]
        new.ver = self.ver[:]
        new.arrays = None
        new.refresh = new._refresher(None)
        return new

    def arrays_for(self, targets: list[int]) -> TargetArrays:
        """The placement rule's numpy copies of `targets`' terms (ascending indices)."""
        return TargetArrays(targets, self.A, self.n1, self.base, self.thr, self.free)

    def use_arrays(self, arr: TargetArrays | None) -> None:
        """Keep `arr` (or no arrays) in sync from now on: `refresh` updates its copies too."""
        self.arrays = arr
        self.refresh = self._refresher(arr)

    def _refresher(self, arr: TargetArrays | None) -> Callable[[int], None]:
        """`refresh(i)`: replica `i`'s T_i and dispatch terms (the one `load_terms`) and their
        copies in `arr`. A closure over the tables: the hot loops call it once per placement, and
        bound tables cost less than attribute reads."""
        n, tok, thr, base, n1, free, ver = (
            self.n,
            self.tok,
            self.thr,
            self.base,
            self.n1,
            self.free,
            self.ver,
        )
        A, B, C, D, cap = self.A, self.B, self.C, self.D, self.cap
        if arr is None:

            def refresh(i: int) -> None:
                k, t = n[i], tok[i]
                thr[i], base[i] = load_terms(A[i], B[i], C[i], D[i], k, t)
                n1[i], free[i] = k + 1, cap[i] - t
                ver[i] += 1

            return refresh
        pos = arr.pos  # replica -> its slot in the arrays
        N1, BASE, THR, FREE = arr.N1, arr.BASE, arr.THR, arr.FREE

        def refresh_arrays(i: int) -> None:
            k, t = n[i], tok[i]
            thr[i], base[i] = terms = load_terms(A[i], B[i], C[i], D[i], k, t)
            n1[i], free[i] = k + 1, cap[i] - t
            ver[i] += 1
            j = pos.get(i)
            if j is not None:
                THR[j], BASE[j] = terms
                N1[j], FREE[j] = k + 1, cap[i] - t

        return refresh_arrays

    def undo(self, touched: Touched) -> None:
        """Put the `touched` replicas' loads (and so their terms) back as they were."""
        n, tok, refresh = self.n, self.tok, self.refresh
        for r, (n0, tok0, _) in touched.items():
            n[r], tok[r] = n0, tok0
            refresh(r)

    def total(self, act: list[int]) -> float:
        """Σ T_i over `act` (the active replicas, ascending), ordered like the scheduler's sum."""
        if self.arrays is not None and _SEQUENTIAL_SUM:
            return self.arrays.total()
        thr = self.thr
        return sum(thr[i] for i in act)

    def total_before(self, act: list[int], touched: Touched) -> float:
        """`total` of the state before the current step: the touched replicas' T_i put back."""
        thr = self.thr
        now = [(r, thr[r]) for r in touched]
        for r, (_, _, t0) in touched.items():
            self._set_thr(r, t0)
        try:
            return self.total(act)
        finally:
            for r, t in now:
                self._set_thr(r, t)

    def _set_thr(self, r: int, t: float) -> None:
        self.thr[r] = t
        arr = self.arrays
        if arr is not None and r in arr.pos:
            arr.THR[arr.pos[r]] = t
