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
- Dispatch's arg-max of dT over the targets is a numpy expression over all replicas when the
  targets are many (same IEEE operations as the scalar loop, first maximum = smallest id);
  non-targets are masked with -inf.
"""
from __future__ import annotations

import heapq
import math
from typing import Iterable

import numpy as np

from pivot.sched.scheduler import _REL_EPS, ShiftAwareScheduler

_VECTOR_MIN = 48  # targets from which the numpy arg-max beats the scalar scan


class TrialBase:
    """Frozen state of one role's scheduler; `run(down, up)` returns the throughput after."""

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
        self.running = [sorted((ln, sid) for sid, ln in r.seqs.items()) for r in reps]
        self.home = {sid: i for i, r in enumerate(reps) for sid in r.seqs}
        prio, seqs = sched._priority, sched._seqs
        self.queue = [(prio(s), s.seq_id, s.prompt_len + s.generated) for s in sched.queued()]  # sorted = a heap
        self._prio, self._seqs = prio, seqs
        self.vector = len(reps) >= _VECTOR_MIN
        if self.vector:
            self.A_arr = np.array(self.A, dtype=np.float64)
            self.one_A = self.A[0] if len(set(self.A)) == 1 else None

    def priority(self, sid: int) -> object:
        return self._prio(self._seqs[sid])

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


class Trial:
    """One what-if run (internal state of `TrialBase.run`)."""

    def __init__(self, b: TrialBase) -> None:
        self.b = b
        self.n, self.tok, self.thr = b.n[:], b.tok[:], b.thr[:]
        self.n1, self.base, self.free = b.n1[:], b.base[:], b.free[:]
        self.active = b.active[:]
        self.queue = b.queue[:]
        self.where: dict[int, int | None] = {}  # sequences moved in this run -> replica index or None
        self.arrivals: dict[int, list[tuple[int, int]]] = {}  # replica -> (length, id) placed here
        self.journal: list[tuple[int, int]] | None = None  # (id, length) moved in a migration step
        self.touched: dict[int, tuple[int, int]] | None = None  # replica -> load before the step
        self.ver = [0] * len(b.ids)
        if b.vector:
            self.N1 = np.array(self.n1, dtype=np.float64)
            self.BASE = np.array(self.base, dtype=np.float64)
            self.THR = np.array(self.thr, dtype=np.float64)
            self.FREE = np.array(self.free, dtype=np.float64)
            self.buf = np.empty(len(b.ids), dtype=np.float64)

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
        if b.vector:
            self.THR[i], self.N1[i], self.BASE[i], self.FREE[i] = thr, n + 1, base, free

    def _place(self, sid: int, ln: int, i: int) -> None:
        if self.touched is not None and i not in self.touched:
            self.touched[i] = (self.n[i], self.tok[i])
        self.n[i] += 1
        self.tok[i] += ln
        self._refresh(i)
        self.where[sid] = i
        self.arrivals.setdefault(i, []).append((ln, sid))

    def _abort(self, sid: int, ln: int, i: int) -> None:
        if self.touched is not None and i not in self.touched:
            self.touched[i] = (self.n[i], self.tok[i])
        self.n[i] -= 1
        self.tok[i] -= ln
        self._refresh(i)
        self.where[sid] = None
        heapq.heappush(self.queue, (self.b.priority(sid), sid, ln))

    def _loc(self, sid: int) -> int | None:
        return self.where.get(sid, self.b.home.get(sid))

    # ---------------------------------------------------------------- operations
    def shift_down(self, leaving: list[int]) -> None:
        b, q = self.b, self.queue
        for i in leaving:
            for ln, sid in b.running[i]:
                q.append((b.priority(sid), sid, ln))
                self.where[sid] = None
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
        if self.b.vector and len(targets) >= _VECTOR_MIN:
            self._dispatch_vector(targets)
            return
        q, free, n1, base, thr, A = self.queue, self.free, self.n1, self.base, self.thr, self.b.A
        journal = self.journal
        while q:
            _, sid, ln = q[0]
            best, best_gain = -1, -math.inf
            for i in targets:
                if free[i] >= ln:
                    g = n1[i] / (base[i] + A[i] * ln) - thr[i]
                    if g > best_gain:
                        best, best_gain = i, g
            if best < 0:
                return  # the head waits for capacity
            heapq.heappop(q)
            if journal is not None:
                journal.append((sid, ln))
            self._place(sid, ln, best)

    def _dispatch_vector(self, targets: list[int]) -> None:
        q, b, journal = self.queue, self.b, self.journal
        mask = np.full(len(b.ids), -np.inf)
        mask[targets] = 0.0  # x + 0.0 == x: target gains stay bit-identical
        N1, BASE, THR, FREE, buf = self.N1, self.BASE, self.THR, self.FREE, self.buf
        one_A, A_arr = b.one_A, b.A_arr
        while q:
            _, sid, ln = q[0]
            if one_A is not None:
                np.add(BASE, one_A * ln, out=buf)
            else:
                np.multiply(A_arr, ln, out=buf)
                np.add(BASE, buf, out=buf)
            np.divide(N1, buf, out=buf)
            np.subtract(buf, THR, out=buf)
            np.add(buf, mask, out=buf)
            i = int(buf.argmax())
            if FREE[i] < ln:  # the best does not fit: mask every replica that cannot hold it
                buf[FREE < ln] = -np.inf
                i = int(buf.argmax())
            if buf[i] == -np.inf:
                return  # the head waits for capacity
            heapq.heappop(q)
            if journal is not None:
                journal.append((sid, ln))
            self._place(sid, ln, i)

    def _migrate(self) -> None:
        """Algorithm 4's migration loop, as `ShiftAwareScheduler._migrate`."""
        b, n, thr, ver = self.b, self.n, self.thr, self.ver
        act = [i for i, a in enumerate(self.active) if a]
        total = self.throughput()
        heap = [(-thr[i], i, ver[i]) for i in act]
        heapq.heapify(heap)
        shortest: dict[int, list[tuple[int, int]]] = {}
        for _ in range(b.num_sequences + 1):  # each kept move raises Σ T_i; N bounds the useful ones
            while heap and heap[0][2] != ver[heap[0][1]]:
                heapq.heappop(heap)  # stale key
            if not heap:
                return
            _, i, _ = heapq.heappop(heap)
            if n[i] == 0:
                return
            short = shortest.get(i)
            if short is None:
                short = [e for e in b.running[i] if self._loc(e[1]) == i]
                short += [e for e in self.arrivals.get(i, ()) if self.where[e[1]] == i]
                short.sort()
                shortest[i] = short
            while self._loc(short[0][1]) != i:  # moved away earlier: drop stale entries
                heapq.heappop(short)
            ln, sid = short[0]
            self.touched = {}
            self.journal = [(sid, ln)]
            self._abort(sid, ln, i)
            self._dispatch(act)
            journal, touched = self.journal, self.touched
            self.journal = self.touched = None
            new_total = self.throughput()
            if new_total <= total * (1 + _REL_EPS):
                for r, (n0, tok0) in touched.items():  # undo: T_i is a function of the load
                    self.n[r], self.tok[r] = n0, tok0
                    self._refresh(r)
                return
            total = new_total
            for c in touched:
                heapq.heappush(heap, (-thr[c], c, ver[c]))
            for s, sl in journal:  # arrivals become candidates for a later "shortest" abort
                loc = self.where[s]
                if loc is not None and loc in shortest:
                    heapq.heappush(shortest[loc], (sl, s))
