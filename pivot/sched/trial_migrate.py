"""Migration steps of a what-if run (`pivot.sched.trial.Trial` inherits `Migration`), the one
load update of a what-if run (`_refresher`: T_i and the dispatch terms by
`throughput.load_terms`, as the scheduler), which also keeps the placement rule's numpy copies
of the targets' terms in sync (`dispatch.TargetArrays`, one set for all steps of a migration).

Algorithm 4's loop: abort the shortest sequence of the replica with the largest T_i, dispatch
it, keep the move if the ordered Σ T_i rose by more than MIGRATION_MIN_GAIN. The sum is
carried as an estimate with a rigorous error bound (`_SLACK` scales it; the ordered sums are
computed only when the bound cannot decide), and when nothing else waits a step is one fused
abort + arg-max + placement (`_fused`).
"""

from __future__ import annotations

import heapq
import sys
from collections.abc import Callable

from pivot.sched.dispatch import TargetArrays
from pivot.sched.throughput import MIGRATION_MIN_GAIN, load_terms

_SLACK = 1.0  # scales the error bound of the estimated Σ T_i (tests: inf = always the ordered sum)
_SEQUENTIAL_SUM = sys.version_info < (3, 12)  # `sum` of floats adds one by one (3.12 compensates)


class Migration:
    """The migration half of `Trial` and its load update (its tables: n, tok, thr, n1, base,
    free, ver, where, arrivals, queue, left, arrays, journal, touched; its `_dispatch`)."""

    def _use_arrays(self, arr: TargetArrays | None) -> None:
        """Keep `arr` (or no arrays) in sync from now on: `_refresh` updates its copies too."""
        self.arrays = arr
        self._refresh = self._refresher(arr)

    def _refresher(self, arr: TargetArrays | None) -> Callable[[int], None]:
        """`refresh(i)`, to call after replica `i`'s load (n, tok) changed: its T_i and dispatch
        terms (the one `load_terms`) and their copies in `arr`. A closure over the tables: the
        hot loops call it once per placement, and bound tables cost less than attribute reads."""
        n, tok, thr, base, n1, free, ver = (
            self.n,
            self.tok,
            self.thr,
            self.base,
            self.n1,
            self.free,
            self.ver,
        )
        A, B, C, D, cap = self.b.A, self.b.B, self.b.C, self.b.D, self.b.cap
        pos: dict[int, int] = {} if arr is None else arr.pos  # replica -> its slot in the arrays
        N1, BASE, THR, FREE = (None,) * 4 if arr is None else (arr.N1, arr.BASE, arr.THR, arr.FREE)

        def refresh(i: int) -> None:
            k, t = n[i], tok[i]
            thr[i], base[i] = terms = load_terms(A[i], B[i], C[i], D[i], k, t)
            n1[i], free[i] = k + 1, cap[i] - t
            ver[i] += 1
            j = pos.get(i)
            if j is not None:
                THR[j], BASE[j] = terms
                N1[j], FREE[j] = k + 1, cap[i] - t

        return refresh

    def _total(self, act: list[int]) -> float:
        """`throughput()` during a migration (act: the active replicas, ascending)."""
        if self.arrays is not None and _SEQUENTIAL_SUM:
            return self.arrays.total()
        thr = self.thr
        return sum(thr[i] for i in act)

    def _fused(
        self, arr: TargetArrays
    ) -> Callable[[int, int, int], dict[int, tuple[int, int, float]]]:
        """`step(i, sid, ln)`: abort `sid` (length `ln`) from replica `i` and dispatch it, the queue
        being otherwise empty (so the dispatch places just this sequence, or leaves it queued):
        `_abort` + `_dispatch` in one. It returns the touched replicas' (n, tok, T_i) before the
        step. A closure: the tables are bound once per migration, not once per step."""
        b, n, tok, thr, refresh = self.b, self.n, self.tok, self.thr, self._refresh
        where, arrivals, queue, best = self.where, self.arrivals, self.queue, arr.best

        def step(i: int, sid: int, ln: int) -> dict[int, tuple[int, int, float]]:
            touched = {i: (n[i], tok[i], thr[i])}
            n[i] -= 1
            tok[i] -= ln
            refresh(i)
            r = best(ln)  # the placement rule (dispatch.py)
            if r < 0:  # it waits for capacity
                where[sid] = None
                heapq.heappush(queue, (b.priority(sid), sid, ln))
                return touched
            if r not in touched:
                touched[r] = (n[r], tok[r], thr[r])
            n[r] += 1
            tok[r] += ln
            refresh(r)
            where[sid] = r
            got = arrivals.get(r)
            if got is None:
                arrivals[r] = [(ln, sid)]
            else:
                got.append((ln, sid))
            return touched

        return step

    def _total_before(self, act: list[int], touched: dict[int, tuple[int, int, float]]) -> float:
        """`_total` of the state before the current step: the touched replicas' T_i put back."""
        thr, arr = self.thr, self.arrays
        now = [(r, thr[r]) for r in touched]
        for r, (_, _, t0) in touched.items():
            self._set_thr(arr, r, t0)
        try:
            return self._total(act)
        finally:
            for r, t in now:
                self._set_thr(arr, r, t)

    def _set_thr(self, arr: TargetArrays | None, r: int, t: float) -> None:
        self.thr[r] = t
        if arr is not None and r in arr.pos:
            arr.THR[arr.pos[r]] = t

    def _migrate_steps(self, act: list[int]) -> None:
        """Each step aborts the shortest sequence of the replica with the largest T_i, dispatches
        it and keeps the move if the ordered Σ T_i rose by more than MIGRATION_MIN_GAIN. The sum
        is carried as an estimate of the real Σ T_i (plus the T_i changes of the touched replicas) with a
        bound on its error; the ordered sum is computed only when the bound cannot decide."""
        b, n, tok, thr, ver, where, arrivals = (
            self.b,
            self.n,
            self.tok,
            self.thr,
            self.ver,
            self.where,
            self.arrivals,
        )
        c, u2 = 1 + MIGRATION_MIN_GAIN, 2.0**-52
        g = (
            1.01 * len(act) * 2.0**-53
        )  # ≥ γ_(R-1): |ordered Σ - real Σ| <= g · real Σ (every T_i >= 0)
        kept = self._total(act)
        err = g * kept  # |kept - real Σ T_i of the kept state| <= err
        # the decision margin, from |ordered Σ - est| and |ordered Σ_kept · c - kept · c| (see below)
        w, sk = 1.01 * g + 4 * u2, _SLACK
        heappop, heappush, queue, left = heapq.heappop, heapq.heappush, self.queue, self.left
        arr = self.arrays
        fused = arr is not None and not self.queue  # see _fused
        step = self._fused(arr) if fused else None
        heap = [(-thr[i], i, ver[i]) for i in act]
        heapq.heapify(heap)
        shortest: dict[int, list[tuple[int, int]]] = {}
        for _ in range(
            b.num_sequences + 1
        ):  # each kept move raises Σ T_i; N bounds the useful ones
            while heap and heap[0][2] != ver[heap[0][1]]:
                heappop(heap)  # stale key
            if not heap:
                return
            _, i, _ = heappop(heap)
            if n[i] == 0:
                return
            short = shortest.get(i)
            if short is None:
                if i in left:  # a sequence here is one of its own (unless moved) or an arrival
                    short = [e for e in b.running(i) if where.get(e[1], i) == i]
                    short += [e for e in arrivals.get(i, ()) if where[e[1]] == i]
                else:  # nothing left i yet: aborts from i go through this list, which is new
                    short = b.running(i) + arrivals.get(i, [])
                short.sort()
                shortest[i] = short
            while where.get(short[0][1], i) != i:  # moved away earlier: drop stale entries
                heappop(short)
            ln, sid = short[0]
            if fused:
                touched = step(i, sid, ln)
                journal = None
            else:
                touched = self.touched = {i: (n[i], tok[i], thr[i])}
                self.journal = [(sid, ln)]
                n[i] -= 1  # abort the shortest sequence back to the queue
                tok[i] -= ln
                self._refresh(i)
                where[sid] = None
                heappush(queue, (b.priority(sid), sid, ln))
                self._dispatch(act)
                journal = self.journal
                self.journal = self.touched = None
            est, moved = kept, 0.0
            for r, (_, _, t0) in touched.items():
                d = thr[r] - t0
                est += d
                moved += abs(d)
            est_err = err + (len(touched) + 1) * u2 * (kept + moved)  # |est - real Σ now|
            th = kept * c
            # |ordered Σ now - est| <= est_err + g·(est + est_err) and |ordered Σ_kept·c - th| <=
            # c·(err + g·(kept + err)) + roundings; with err <= est_err, c < 1.001, g < 1e-9 both
            # fit in 2.01·est_err + w·(kept + est)
            slack = sk * (2.01 * est_err + w * (kept + est))
            if est - slack > th:
                stop = False
            elif est + slack < th:
                stop = True
            else:  # too close to call: the exact test on ordered sums
                new_total = self._total(act)
                stop = new_total <= self._total_before(act, touched) * (1 + MIGRATION_MIN_GAIN)
                est, est_err = new_total, g * new_total
            if stop:
                for r, (n0, tok0, _) in touched.items():  # undo: T_i is a function of the load
                    n[r], tok[r] = n0, tok0
                    self._refresh(r)
                return
            kept, err = est, est_err
            if err > 4 * g * kept:  # drifted: restart from the ordered sum
                kept = self._total(act)
                err = g * kept
            for r in touched:
                heappush(heap, (-thr[r], r, ver[r]))
            if journal is None:  # fused: the journal is the aborted sequence alone
                loc = where[sid]
                if loc is not None and loc in shortest:  # an arrival: a candidate for a later abort
                    heappush(shortest[loc], (ln, sid))
                if queue:  # it waits: later steps dispatch it first, as the scheduler
                    fused = False
                continue
            for s, sl in journal:  # arrivals become candidates for a later "shortest" abort
                loc = where[s]
                if loc is not None and loc in shortest:
                    heappush(shortest[loc], (sl, s))
