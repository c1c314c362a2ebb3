"""What-if runs of one role's scheduler for the planner (step 4): shift down, then shift up
with migration, then read the role's throughput. Same decisions, bit for bit, as calling
`ShiftAwareScheduler.shift_down` / `shift_up` on a clone (tests/sched/test_trial.py), but
built for many candidates over one state:

- `TrialBase(sched)` freezes the state once (per-replica loads as lists, running sequences
  sorted by (length, id), the live queue as a heap of (priority, id, length)); each
  `run(down, up)` copies only flat lists, never per-sequence dicts.
- Only what the result needs is tracked: replica loads, where moved sequences are, and the
  arrivals per replica (for migration's "shortest sequence"). A rejected migration step is
  undone by restoring the loads of the replicas it touched (T_i is a function of the load).
- Dispatch's arg-max of dT over many targets is numpy over compact copies of their terms
  (`_Arrays`: same IEEE operations as the scalar scan, and argmax returns the first maximum,
  i.e. the smallest id). A migration keeps one set for all its steps, which also gives the
  ordered Σ T_i that decides each step (np.add.accumulate adds one by one, like `sum`).
- Migration carries Σ T_i as an estimate (the last kept value plus the touched replicas' T_i
  changes) with a rigorous bound on its distance to the ordered sum; the ordered sums are
  computed only when the bound cannot decide the keep/stop test (`_SLACK`).
- When nothing else waits, a migration step is one fused abort + arg-max + placement
  (`_fused`); a dispatch that places many sequences takes them from the queue sorted once.
"""
from __future__ import annotations

import heapq
import math
import sys
from typing import Callable, Iterable

import numpy as np

from pivot.sched.scheduler import _REL_EPS, ShiftAwareScheduler

_VECTOR_MIN = 40  # targets from which the numpy arg-max beats the scalar scan
_SORT_AFTER, _SORT_MIN = 8, 32  # a dispatch that placed 8 of a queue of 32+ sorts the rest once
_SLACK = 1.0  # scales the error bound of the estimated Σ T_i (tests: inf = always the ordered sum)
_SEQUENTIAL_SUM = sys.version_info < (3, 12)  # `sum` of floats adds one by one (3.12 compensates)


class TrialBase:
    """Frozen state of one role's scheduler; `run(down, up)` returns the `Trial` after the
    shifts (read `throughput()` or `busy()`). It reads the scheduler's per-replica and
    sequence tables without copying them: the scheduler must not change while it is used."""

    def __init__(self, sched: ShiftAwareScheduler) -> None:
        reps = list(sched._reps.values())  # ascending id
        self.ids = [r.rid for r in reps]
        self.index = {rid: i for i, rid in enumerate(self.ids)}
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
        self.active = [r.active for r in reps]
        self.migrate = sched.migrate
        self.num_sequences = sched.num_sequences()
        self._seqs_of = [r.seqs for r in reps]  # read only: the scheduler is not touched while planning
        self._running: dict[int, list[tuple[int, int]]] = {}
        where, qver, seqs = sched._where, sched._qver, sched._seqs
        heap = sched._queue
        self.queue = [(p, sid, seqs[sid].prompt_len + seqs[sid].generated) for p, sid, v in heap if where.get(sid, 0) is None and qver.get(sid) == v]
        if len(self.queue) != len(heap):
            heapq.heapify(self.queue)  # stale entries dropped; (priority, id) still orders the rest
        self._prio, self._seqs = sched._priority, seqs
        self._prios: dict[int, object] = {}
        self._leaving: dict[int, tuple[list[tuple[object, int, int]], dict[int, None]]] = {}

    def priority(self, sid: int) -> object:
        p = self._prios.get(sid)
        if p is None:
            p = self._prios[sid] = self._prio(self._seqs[sid])
        return p

    def leaving(self, i: int) -> tuple[list[tuple[object, int, int]], dict[int, None]]:
        """Replica index `i` shifted down: its queue entries (priority, id, length) and its
        sequences as `where` entries (id -> None), built once for every candidate."""
        out = self._leaving.get(i)
        if out is None:
            run = self.running(i)
            out = self._leaving[i] = ([(self.priority(sid), sid, ln) for ln, sid in run], dict.fromkeys(sid for _, sid in run))
        return out

    def running(self, i: int) -> list[tuple[int, int]]:
        """(length, id) of the sequences on replica index `i` in the frozen state, ascending."""
        out = self._running.get(i)
        if out is None:
            seqs = self._seqs_of[i]
            out = self._running[i] = sorted(zip(seqs.values(), seqs))
        return out

    def run(self, down: Iterable[int], up: Iterable[int]) -> "Trial":
        """Shift down `down`, then shift up `up` (replica ids, sorted inside), like the scheduler."""
        t = Trial(self)
        d = sorted(set(down))
        u = sorted(set(up))
        if d:
            t.shift_down([self.index[r] for r in d])
        if u:
            t.shift_up([self.index[r] for r in u])
        return t


class _Arrays:
    """Compact numpy copies of the dispatch terms of `targets` (ascending), for the arg-max."""

    def __init__(self, t: "Trial", targets: list[int]) -> None:
        A = t.b.A
        self.targets, self.pos = targets, {r: j for j, r in enumerate(targets)}
        self.N1 = np.array([t.n1[i] for i in targets], dtype=np.float64)
        self.BASE = np.array([t.base[i] for i in targets], dtype=np.float64)
        self.THR = np.array([t.thr[i] for i in targets], dtype=np.float64)
        self.FREE = np.array([t.free[i] for i in targets], dtype=np.float64)
        self.buf = np.empty(len(targets), dtype=np.float64)
        self.sums = np.empty(len(targets), dtype=np.float64)
        self.shift = np.empty((), dtype=np.float64)  # A*l as a 0-d array: cheaper to pass than a float
        a0 = A[targets[0]]
        self.one_A = a0 if all(A[i] == a0 for i in targets) else None
        self.A = None if self.one_A is not None else np.array([A[i] for i in targets], dtype=np.float64)

    def sync(self, t: "Trial", i: int) -> None:
        j = self.pos.get(i)
        if j is not None:
            self.N1[j], self.BASE[j], self.THR[j], self.FREE[j] = t.n1[i], t.base[i], t.thr[i], t.free[i]

    def total(self) -> float:
        """Σ T_i over the targets in ascending id, added one by one like `sum` (3.11)."""
        return float(np.add.accumulate(self.THR, out=self.sums)[-1])


class Trial:
    """One what-if run (internal state of `TrialBase.run`)."""

    def __init__(self, b: TrialBase) -> None:
        self.b = b
        self.n, self.tok, self.thr = b.n[:], b.tok[:], b.thr[:]
        self.n1, self.base, self.free = b.n1[:], b.base[:], b.free[:]
        self.active = b.active[:]
        self.queue = b.queue[:]
        self.where: dict[int, int | None] = {}  # sequences moved in this run -> replica index or None
        self.arrivals: dict[int, list[tuple[int, int]]] = {}  # replica -> (length, id) placed on it
        self.left: set[int] = set()  # replicas shifted down in this run
        self.journal: list[tuple[int, int]] | None = None  # (id, length) moved in a migration step
        self.touched: dict[int, tuple[int, int, float]] | None = None  # replica -> (n, tok, T_i) before the step
        self.ver = [0] * len(b.ids)
        self.arrays: _Arrays | None = None  # kept in sync during a migration

    # ---------------------------------------------------------------- results
    def throughput(self) -> float:
        """Σ T_i over the active replicas, summed in ascending id like the scheduler."""
        thr, act = self.thr, self.active
        return sum(thr[i] for i in range(len(act)) if act[i])

    def busy(self) -> int:
        """Active replicas with at least one sequence (the no-throughput-model rate)."""
        n, act = self.n, self.active
        return sum(1 for i in range(len(act)) if act[i] and n[i] > 0)

    # ---------------------------------------------------------------- load updates
    def _refresh(self, i: int) -> None:
        b = self.b
        n, a_tok, bb, c, d = self.n[i], b.A[i] * self.tok[i], b.B[i], b.C[i], b.D[i]
        cn, cn1 = c * n, c * (n + 1)
        thr = n / (a_tok + (bb if bb >= cn else cn) + d) if n else 0.0
        base = a_tok + (bb if bb >= cn1 else cn1) + d
        free = b.cap[i] - self.tok[i]
        self.thr[i], self.n1[i], self.base[i], self.free[i] = thr, n + 1, base, free
        self.ver[i] += 1
        if self.arrays is not None:
            self.arrays.sync(self, i)

    # ---------------------------------------------------------------- operations
    def shift_down(self, leaving: list[int]) -> None:
        b, q = self.b, self.queue
        for i in leaving:
            entries, gone = b.leaving(i)
            q.extend(entries)
            self.where.update(gone)
            self.left.add(i)
            self.n[i], self.tok[i] = 0, 0
            self._refresh(i)
            self.active[i] = False
        heapq.heapify(q)
        self._dispatch([i for i, a in enumerate(self.active) if a])

    def shift_up(self, joining: list[int]) -> None:
        for i in joining:
            self.active[i] = True
        self._dispatch(joining)
        if self.b.migrate:
            self._migrate()

    def _dispatch(self, targets: list[int]) -> None:
        if self.arrays is not None:
            self._dispatch_vector(self.arrays)
            return
        if len(targets) >= _VECTOR_MIN and len(self.queue) > 2:  # else building arrays costs more
            self._dispatch_vector(_Arrays(self, targets))
            return
        q, b, journal, touched = self.queue, self.b, self.journal, self.touched
        n, tok, thr, n1, base, free, ver, arrivals, where = (
            self.n, self.tok, self.thr, self.n1, self.base, self.free, self.ver, self.arrivals, self.where
        )
        A, B, C, D, cap, heappop = b.A, b.B, b.C, b.D, b.cap, heapq.heappop
        a0 = A[targets[0]] if targets else 0.0
        one_A = all(A[r] == a0 for r in targets)  # then A*l once per sequence: the same product
        h, pops = 0, 0  # h: entries taken from q once sorted (a sorted list is a heap too)
        try:
            while h < len(q):
                _, sid, ln = q[h]
                i, best_gain = -1, -math.inf
                if one_A:
                    s = a0 * ln
                    for r in targets:
                        if free[r] >= ln:
                            g = n1[r] / (base[r] + s) - thr[r]
                            if g > best_gain:
                                i, best_gain = r, g
                else:
                    for r in targets:
                        if free[r] >= ln:
                            g = n1[r] / (base[r] + A[r] * ln) - thr[r]
                            if g > best_gain:
                                i, best_gain = r, g
                if i < 0:
                    return  # the head waits for capacity
                if h:
                    h += 1
                elif pops < _SORT_AFTER or len(q) < _SORT_MIN:
                    heappop(q)
                    pops += 1
                else:  # many placements so far: take the rest in order from a sorted list
                    q.sort()
                    h = 1  # q[0], the head placed now, stays first
                if journal is not None:
                    journal.append((sid, ln))
                    if i not in touched:
                        touched[i] = (n[i], tok[i], thr[i])
                k, t = n[i] + 1, tok[i] + ln  # the placement, inlined: same arithmetic as _refresh
                n[i], tok[i] = k, t
                a_tok, bb, c, d = A[i] * t, B[i], C[i], D[i]
                ck, ck1 = c * k, c * (k + 1)
                thr[i] = k / (a_tok + (bb if bb >= ck else ck) + d)
                base[i] = a_tok + (bb if bb >= ck1 else ck1) + d
                free[i] = cap[i] - t
                n1[i] = k + 1
                ver[i] += 1
                where[sid] = i
                got = arrivals.get(i)
                if got is None:
                    arrivals[i] = [(ln, sid)]
                else:
                    got.append((ln, sid))
        finally:
            if h:
                del q[:h]

    def _dispatch_vector(self, arr: _Arrays) -> None:
        """`_dispatch` with the arg-max over compact numpy copies of the targets' dispatch terms
        (the placement is inlined: same arithmetic as `_refresh`)."""
        q, b, journal, touched = self.queue, self.b, self.journal, self.touched
        n, tok, thr, n1, base, free, ver, arrivals, where = (
            self.n, self.tok, self.thr, self.n1, self.base, self.free, self.ver, self.arrivals, self.where
        )
        A, B, C, D, cap = b.A, b.B, b.C, b.D, b.cap
        targets, N1, BASE, THR, FREE, buf, shift = arr.targets, arr.N1, arr.BASE, arr.THR, arr.FREE, arr.buf, arr.shift
        one_A, A_t = arr.one_A, arr.A
        add, div, sub, heappop = np.add, np.divide, np.subtract, heapq.heappop
        h, pops = 0, 0  # as in _dispatch
        try:
            while h < len(q):
                _, sid, ln = q[h]
                if one_A is not None:
                    shift[()] = one_A * ln
                    add(BASE, shift, out=buf)
                else:
                    np.multiply(A_t, ln, out=buf)
                    add(BASE, buf, out=buf)
                div(N1, buf, out=buf)
                sub(buf, THR, out=buf)
                j = buf.argmax()  # first maximum: the smallest id, as the scalar scan
                i = targets[j]
                if free[i] < ln:  # the best does not fit: drop every replica that cannot hold it
                    buf[FREE < ln] = -np.inf
                    j = buf.argmax()
                    if buf[j] == -np.inf:
                        return  # the head waits for capacity
                    i = targets[j]
                if h:
                    h += 1
                elif pops < _SORT_AFTER or len(q) < _SORT_MIN:
                    heappop(q)
                    pops += 1
                else:
                    q.sort()
                    h = 1
                if journal is not None:
                    journal.append((sid, ln))
                    if i not in touched:
                        touched[i] = (n[i], tok[i], thr[i])
                k, t = n[i] + 1, tok[i] + ln
                n[i], tok[i] = k, t
                a_tok, bb, c, d = A[i] * t, B[i], C[i], D[i]
                ck, ck1 = c * k, c * (k + 1)
                thr[i] = THR[j] = k / (a_tok + (bb if bb >= ck else ck) + d)
                base[i] = BASE[j] = a_tok + (bb if bb >= ck1 else ck1) + d
                free[i] = FREE[j] = cap[i] - t
                n1[i] = N1[j] = k + 1
                ver[i] += 1
                where[sid] = i
                got = arrivals.get(i)
                if got is None:
                    arrivals[i] = [(ln, sid)]
                else:
                    got.append((ln, sid))
        finally:
            if h:
                del q[:h]

    def _migrate(self) -> None:
        """Algorithm 4's migration loop, as `ShiftAwareScheduler._migrate`."""
        act = [i for i, a in enumerate(self.active) if a]
        if len(act) >= _VECTOR_MIN:  # one set of arrays for every step's dispatch and total
            self.arrays = _Arrays(self, act)
        try:
            self._migrate_steps(act)
        finally:
            self.arrays = None

    def _total(self, act: list[int]) -> float:
        """`throughput()` during a migration (act: the active replicas, ascending)."""
        if self.arrays is not None and _SEQUENTIAL_SUM:
            return self.arrays.total()
        thr = self.thr
        return sum(thr[i] for i in act)

    def _fused(self, arr: _Arrays) -> Callable[[int, int, int], dict[int, tuple[int, int, float]]]:
        """`step(i, sid, ln)`: abort `sid` (length `ln`) from replica `i` and dispatch it, the queue
        being otherwise empty (so the dispatch places just this sequence, or leaves it queued):
        `_abort` + `_dispatch_vector` with the placements inlined (same arithmetic as `_refresh`).
        It returns the touched replicas' (n, tok, T_i) before the step. A closure: the tables
        are bound once per migration, not once per step."""
        b, n, tok, thr, n1, base, free, ver = self.b, self.n, self.tok, self.thr, self.n1, self.base, self.free, self.ver
        A, B, C, D, cap, where, arrivals, queue = b.A, b.B, b.C, b.D, b.cap, self.where, self.arrivals, self.queue
        N1, BASE, THR, FREE, buf, shift, pos, targets, one_A = (
            arr.N1, arr.BASE, arr.THR, arr.FREE, arr.buf, arr.shift, arr.pos, arr.targets, arr.one_A
        )
        add, div, sub, argmax, inf = np.add, np.divide, np.subtract, buf.argmax, -np.inf

        def step(i: int, sid: int, ln: int) -> dict[int, tuple[int, int, float]]:
            touched = {i: (n[i], tok[i], thr[i])}
            k, t = n[i] - 1, tok[i] - ln
            n[i], tok[i] = k, t
            a_tok, bb, c, d = A[i] * t, B[i], C[i], D[i]
            ck, ck1 = c * k, c * (k + 1)
            j = pos[i]
            thr[i] = THR[j] = k / (a_tok + (bb if bb >= ck else ck) + d) if k else 0.0
            base[i] = BASE[j] = a_tok + (bb if bb >= ck1 else ck1) + d
            free[i] = FREE[j] = cap[i] - t
            n1[i] = N1[j] = k + 1
            ver[i] += 1
            shift[()] = one_A * ln
            add(BASE, shift, out=buf)
            div(N1, buf, out=buf)
            sub(buf, THR, out=buf)
            j = argmax()  # first maximum: the smallest id, as the scalar scan
            r = targets[j]
            if free[r] < ln:  # the best does not fit: drop every replica that cannot hold it
                buf[FREE < ln] = inf
                j = argmax()
                if buf[j] == inf:  # it waits for capacity
                    where[sid] = None
                    heapq.heappush(queue, (b.priority(sid), sid, ln))
                    return touched
                r = targets[j]
            if r not in touched:
                touched[r] = (n[r], tok[r], thr[r])
            k, t = n[r] + 1, tok[r] + ln
            n[r], tok[r] = k, t
            a_tok, bb, c, d = A[r] * t, B[r], C[r], D[r]
            ck, ck1 = c * k, c * (k + 1)
            thr[r] = THR[j] = k / (a_tok + (bb if bb >= ck else ck) + d)
            base[r] = BASE[j] = a_tok + (bb if bb >= ck1 else ck1) + d
            free[r] = FREE[j] = cap[r] - t
            n1[r] = N1[j] = k + 1
            ver[r] += 1
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

    def _set_thr(self, arr: _Arrays | None, r: int, t: float) -> None:
        self.thr[r] = t
        if arr is not None and r in arr.pos:
            arr.THR[arr.pos[r]] = t

    def _migrate_steps(self, act: list[int]) -> None:
        """Each step aborts the shortest sequence of the replica with the largest T_i, dispatches
        it and keeps the move if the ordered Σ T_i rose by more than _REL_EPS. The sum is carried
        as an estimate of the real Σ T_i (plus the T_i changes of the touched replicas) with a
        bound on its error; the ordered sum is computed only when the bound cannot decide."""
        b, n, tok, thr, ver, where, arrivals = self.b, self.n, self.tok, self.thr, self.ver, self.where, self.arrivals
        c, u2 = 1 + _REL_EPS, 2.0**-52
        g = 1.01 * len(act) * 2.0**-53  # ≥ γ_(R-1): |ordered Σ - real Σ| <= g · real Σ (every T_i >= 0)
        kept = self._total(act)
        err = g * kept  # |kept - real Σ T_i of the kept state| <= err
        # the decision margin, from |ordered Σ - est| and |ordered Σ_kept · c - kept · c| (see below)
        w, sk = 1.01 * g + 4 * u2, _SLACK
        heappop, heappush, queue, left = heapq.heappop, heapq.heappush, self.queue, self.left
        arr = self.arrays
        fused = arr is not None and arr.one_A is not None and not self.queue  # see _fused
        step = self._fused(arr) if fused else None
        heap = [(-thr[i], i, ver[i]) for i in act]
        heapq.heapify(heap)
        shortest: dict[int, list[tuple[int, int]]] = {}
        for _ in range(b.num_sequences + 1):  # each kept move raises Σ T_i; N bounds the useful ones
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
                stop = new_total <= self._total_before(act, touched) * (1 + _REL_EPS)
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
