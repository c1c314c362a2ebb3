"""What-if runs of one role's scheduler for the planner (step 4): shift down, then shift up
with migration, then read the role's throughput. Same decisions, bit for bit, as calling
`ShiftAwareScheduler.shift_down` / `shift_up` on a clone (tests/sched/test_trial.py), but
built for many candidates over one state:

- `ShiftAwareScheduler.what_if()` builds the `TrialBase`, which freezes the state once
  (per-replica loads as lists, running sequences sorted by (length, id), the live queue as a
  heap of (priority, id, length)); each `run(down, up)` copies only flat lists, never
  per-sequence dicts.
- Only what the result needs is tracked: replica loads, where moved sequences are, and the
  arrivals per replica (for migration's "shortest sequence"). A rejected migration step is
  undone by restoring the loads of the replicas it touched (T_i is a function of the load).
- Dispatch places each head by the placement rule of pivot/sched/dispatch.py, the scheduler's
  own: its scan over this run's tables, or for many targets its numpy kernel over compact
  copies of their terms (`TargetArrays`). A migration keeps one set for all its steps, which
  also gives the ordered Σ T_i that decides each step (np.add.accumulate adds one by one, like
  `sum`).
- Migration carries Σ T_i as an estimate (the last kept value plus the touched replicas' T_i
  changes) with a rigorous bound on its distance to the ordered sum; the ordered sums are
  computed only when the bound cannot decide the keep/stop test; when nothing else waits a
  step is one fused abort + arg-max + placement (trial_migrate.py, which `Trial` inherits).
- A dispatch that places many sequences takes them from the queue sorted once.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pivot.sched.dispatch import TargetArrays, best_target
from pivot.sched.records import SeqState
from pivot.sched.replica_load import ReplicaLoad
from pivot.sched.trial_migrate import Migration

_VECTOR_MIN = 40  # targets from which the numpy arg-max beats the scalar scan
_SORT_AFTER, _SORT_MIN = 8, 32  # a dispatch that placed 8 of a queue of 32+ sorts the rest once


class TrialBase:
    """Frozen state of one role's scheduler (from `ShiftAwareScheduler.what_if`); `run(down,
    up)` returns the `Trial` after the shifts (read `throughput()` or `busy()`). It reads the
    scheduler's per-replica and sequence tables without copying them: the scheduler must not
    change while it is used."""

    def __init__(
        self,
        reps: list[ReplicaLoad],
        queue: list[tuple[Any, int, int]],
        seqs: Mapping[int, SeqState],
        priority: Callable[[SeqState], Any],
        migrate: bool,
    ) -> None:
        """`reps`: every slot's load, ascending id; `queue`: the live queue as a heap of
        (priority, id, length); `seqs`: every known sequence (running and queued)."""
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
        self.migrate = migrate
        self.num_sequences = len(seqs)
        self._seqs_of = [
            r.seqs for r in reps
        ]  # read only: the scheduler is not touched while planning
        self._running: dict[int, list[tuple[int, int]]] = {}
        self.queue = queue
        self._prio, self._seqs = priority, seqs
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
            out = self._leaving[i] = (
                [(self.priority(sid), sid, ln) for ln, sid in run],
                dict.fromkeys(sid for _, sid in run),
            )
        return out

    def running(self, i: int) -> list[tuple[int, int]]:
        """(length, id) of the sequences on replica index `i` in the frozen state, ascending."""
        out = self._running.get(i)
        if out is None:
            seqs = self._seqs_of[i]
            out = self._running[i] = sorted(zip(seqs.values(), seqs))
        return out

    def run(self, down: Iterable[int], up: Iterable[int]) -> Trial:
        """Shift down `down`, then shift up `up` (replica ids, sorted inside), like the scheduler."""
        t = Trial(self)
        d = sorted(set(down))
        u = sorted(set(up))
        if d:
            t.shift_down([self.index[r] for r in d])
        if u:
            t.shift_up([self.index[r] for r in u])
        return t


class Trial(Migration):
    """One what-if run (internal state of `TrialBase.run`)."""

    def __init__(self, b: TrialBase) -> None:
        self.b = b
        self.n, self.tok, self.thr = b.n[:], b.tok[:], b.thr[:]
        self.n1, self.base, self.free = b.n1[:], b.base[:], b.free[:]
        self.active = b.active[:]
        self.queue = b.queue[:]
        self.where: dict[
            int, int | None
        ] = {}  # sequences moved in this run -> replica index or None
        self.arrivals: dict[int, list[tuple[int, int]]] = {}  # replica -> (length, id) placed on it
        self.left: set[int] = set()  # replicas shifted down in this run
        self.journal: list[tuple[int, int]] | None = None  # (id, length) moved in a migration step
        self.touched: dict[int, tuple[int, int, float]] | None = (
            None  # replica -> (n, tok, T_i) before the step
        )
        self.ver = [0] * len(b.ids)
        self.arrays: TargetArrays | None = (
            None  # numpy copies of the targets' terms, during a migration
        )
        self._refresh: Callable[[int], None] = self._refresher(None)

    # ---------------------------------------------------------------- results
    def throughput(self) -> float:
        """Σ T_i over the active replicas, summed in ascending id like the scheduler."""
        thr, act = self.thr, self.active
        return sum(thr[i] for i in range(len(act)) if act[i])

    def busy(self) -> int:
        """Active replicas with at least one sequence (the no-throughput-model rate)."""
        n, act = self.n, self.active
        return sum(1 for i in range(len(act)) if act[i] and n[i] > 0)

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
        """Dispatch the queue onto `targets` (indices, ascending) as the scheduler does: each head
        goes where the placement rule (dispatch.py) says, or waits with the rest of the queue.
        During a migration the targets are the arrays' (`self.arrays`: `_refresh` keeps them in
        sync)."""
        arr = self.arrays
        if (
            arr is None and len(targets) >= _VECTOR_MIN and len(self.queue) > 2
        ):  # else building arrays costs more
            self._use_arrays(self._arrays(targets))
            try:
                self._dispatch(targets)
            finally:
                self._use_arrays(None)
            return
        pick = None if arr is None else arr.best
        q, journal, touched, refresh = self.queue, self.journal, self.touched, self._refresh
        n, tok, thr, n1, base, free, arrivals, where = (
            self.n,
            self.tok,
            self.thr,
            self.n1,
            self.base,
            self.free,
            self.arrivals,
            self.where,
        )
        A, heappop = self.b.A, heapq.heappop
        h, pops = 0, 0  # h: entries taken from q once sorted (a sorted list is a heap too)
        try:
            while h < len(q):
                _, sid, ln = q[h]
                i = best_target(ln, targets, A, n1, base, thr, free) if pick is None else pick(ln)
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
                n[i] += 1
                tok[i] += ln
                refresh(i)
                where[sid] = i
                got = arrivals.get(i)
                if got is None:
                    arrivals[i] = [(ln, sid)]
                else:
                    got.append((ln, sid))
        finally:
            if h:
                del q[:h]

    def _arrays(self, targets: list[int]) -> TargetArrays:
        """The numpy kernel's copies of `targets`' terms (many targets)."""
        return TargetArrays(targets, self.b.A, self.n1, self.base, self.thr, self.free)

    def _migrate(self) -> None:
        """Algorithm 4's migration loop, as `ShiftAwareScheduler._migrate`."""
        act = [i for i, a in enumerate(self.active) if a]
        if len(act) >= _VECTOR_MIN:  # one set of arrays for every step's dispatch and total
            self._use_arrays(self._arrays(act))
        try:
            self._migrate_steps(act)
        finally:
            self._use_arrays(None)
