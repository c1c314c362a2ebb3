"""What-if runs of one role's scheduler for the planner (step 4): shift down, then shift up
with migration, then read the role's throughput. Same decisions, bit for bit, as calling
`ShiftAwareScheduler.shift_down` / `shift_up` on a clone (tests/sched/test_trial.py), but
built for many candidates over one state:

- `ShiftAwareScheduler.what_if()` builds the `TrialBase`, which freezes the state once
  (per-replica loads as lists, running sequences sorted by (length, id), the live queue as a
  heap of (priority, id, length)); each `run(down, up)` gives a `Trial` that copies only flat
  lists, never per-sequence dicts.
- Only what the result needs is tracked: replica loads (`TrialLoads`, trial_loads.py: the load
  and the terms that follow from it, in one update), where moved sequences are, and the
  arrivals per replica (for migration's "shortest sequence"). A rejected migration step is
  undone by restoring the loads of the replicas it touched (T_i is a function of the load).
- Dispatch places each head by the placement rule of pivot/sched/dispatch.py, the scheduler's
  own: its scan over this run's tables, or for many targets its numpy kernel over compact
  copies of their terms (`TargetArrays`). A migration keeps one set for all its steps, which
  also gives the ordered Σ T_i that decides each step (np.add.accumulate adds one by one, like
  `sum`).
- Migration (Algorithm 4, as `ShiftAwareScheduler._migrate`: a method of the run, like the
  scheduler's, since it aborts from and dispatches into the run's own tables) carries Σ T_i as
  an estimate (the last kept value plus the touched replicas' T_i changes) with a rigorous bound
  on its distance to the ordered sum; the ordered sums are computed only when the bound cannot
  decide the keep/stop test; when nothing else waits a step is one fused abort + arg-max +
  placement (`Trial._fused`).
- A dispatch that places many sequences takes them from the queue sorted once.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pivot.sched.dispatch import TargetArrays, best_target
from pivot.sched.records import SeqState
from pivot.sched.replica_load import ReplicaLoad
from pivot.sched.throughput import MIGRATION_MIN_GAIN
from pivot.sched.trial_loads import Touched, TrialLoads

_VECTOR_MIN = 40  # targets from which the numpy arg-max beats the scalar scan
_SORT_AFTER, _SORT_MIN = 8, 32  # a dispatch that placed 8 of a queue of 32+ sorts the rest once
_SLACK = 1.0  # scales the error bound of the estimated Σ T_i (tests: inf = always the ordered sum)

QueueEntry = tuple[Any, int, int]
"""(priority, sequence id, length): the live queue's heap entries."""


class TrialBase:
    """Frozen state of one role's scheduler (from `ShiftAwareScheduler.what_if`); `run(down,
    up)` returns the `Trial` after the shifts (read `throughput()` or `busy()`). It reads the
    scheduler's per-replica and sequence tables without copying them: the scheduler must not
    change while it is used."""

    def __init__(
        self,
        reps: list[ReplicaLoad],
        queue: list[QueueEntry],
        seqs: Mapping[int, SeqState],
        priority: Callable[[SeqState], Any],
        migrate: bool,
    ) -> None:
        """`reps`: every slot's load, ascending id; `queue`: the live queue as a heap of
        (priority, id, length); `seqs`: every known sequence (running and queued)."""
        self.ids = [r.rid for r in reps]
        self.index = {rid: i for i, rid in enumerate(self.ids)}
        self.loads = TrialLoads(reps)
        self.active = [r.active for r in reps]
        self.migrate = migrate
        self.num_sequences = len(seqs)
        # read only: the scheduler is not touched while planning
        self._seqs_of = [r.seqs for r in reps]
        self._running: dict[int, list[tuple[int, int]]] = {}
        self.queue = queue
        self._prio, self._seqs = priority, seqs
        self._prios: dict[int, Any] = {}
        self._leaving: dict[int, tuple[list[QueueEntry], dict[int, None]]] = {}

    def priority(self, sid: int) -> Any:
        p = self._prios.get(sid)
        if p is None:
            p = self._prios[sid] = self._prio(self._seqs[sid])
        return p

    def leaving(self, i: int) -> tuple[list[QueueEntry], dict[int, None]]:
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


class Trial:
    """One what-if run (internal state of `TrialBase.run`): its own loads, active replicas and
    queue, and what it moved."""

    def __init__(self, b: TrialBase) -> None:
        self.b = b
        self.loads = b.loads.copy()
        self.active = b.active[:]
        self.queue = b.queue[:]
        self.where: dict[int, int | None] = {}  # sequences moved in this run -> replica or None
        self.arrivals: dict[int, list[tuple[int, int]]] = {}  # replica -> (length, id) placed on it
        self.left: set[int] = set()  # replicas shifted down in this run

    # ---------------------------------------------------------------- results
    def throughput(self) -> float:
        """Σ T_i over the active replicas, summed in ascending id like the scheduler."""
        thr, act = self.loads.thr, self.active
        return sum(thr[i] for i in range(len(act)) if act[i])

    def busy(self) -> int:
        """Active replicas with at least one sequence (the no-throughput-model rate)."""
        n, act = self.loads.n, self.active
        return sum(1 for i in range(len(act)) if act[i] and n[i] > 0)

    # ---------------------------------------------------------------- operations
    def shift_down(self, leaving: list[int]) -> None:
        b, q, loads = self.b, self.queue, self.loads
        n, tok, refresh = loads.n, loads.tok, loads.refresh
        for i in leaving:
            entries, gone = b.leaving(i)
            q.extend(entries)
            self.where.update(gone)
            self.left.add(i)
            n[i], tok[i] = 0, 0
            refresh(i)
            self.active[i] = False
        heapq.heapify(q)
        self._dispatch([i for i, a in enumerate(self.active) if a])

    def shift_up(self, joining: list[int]) -> None:
        for i in joining:
            self.active[i] = True
        self._dispatch(joining)
        if self.b.migrate:
            self._migrate()

    def _dispatch(
        self,
        targets: list[int],
        journal: list[tuple[int, int]] | None = None,
        touched: Touched | None = None,
    ) -> None:
        """Dispatch the queue onto `targets` (indices, ascending) as the scheduler does: each head
        goes where the placement rule (dispatch.py) says, or waits with the rest of the queue.
        During a migration the targets are the loads' arrays (`loads.arrays`), and a step passes
        its `journal` ((id, length) of each placement) and `touched` (the loads before it)."""
        loads = self.loads
        arr = loads.arrays
        if (
            arr is None and len(targets) >= _VECTOR_MIN and len(self.queue) > 2
        ):  # else building arrays costs more
            loads.use_arrays(loads.arrays_for(targets))
            try:
                self._dispatch(targets, journal, touched)
            finally:
                loads.use_arrays(None)
            return
        pick = None if arr is None else arr.best
        q, refresh, arrivals, where = self.queue, loads.refresh, self.arrivals, self.where
        n, tok, thr, n1, base, free, A = (
            loads.n,
            loads.tok,
            loads.thr,
            loads.n1,
            loads.base,
            loads.free,
            loads.A,
        )
        heappop = heapq.heappop
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
                if journal is not None and touched is not None:
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

    # ---------------------------------------------------------------- migration
    def _migrate(self) -> None:
        """Algorithm 4's migration loop, as `ShiftAwareScheduler._migrate`."""
        loads = self.loads
        act = [i for i, a in enumerate(self.active) if a]
        if len(act) >= _VECTOR_MIN:  # one set of arrays for every step's dispatch and total
            loads.use_arrays(loads.arrays_for(act))
        try:
            self._migrate_steps(act)
        finally:
            loads.use_arrays(None)

    def _fused(self, arr: TargetArrays) -> Callable[[int, int, int], Touched]:
        """`step(i, sid, ln)`: abort `sid` (length `ln`) from replica `i` and dispatch it, the queue
        being otherwise empty (so the dispatch places just this sequence, or leaves it queued):
        abort + `_dispatch` in one. It returns the touched replicas' (n, tok, T_i) before the
        step. A closure: the tables are bound once per migration, not once per step."""
        b, loads = self.b, self.loads
        n, tok, thr, refresh = loads.n, loads.tok, loads.thr, loads.refresh
        where, arrivals, queue, best = self.where, self.arrivals, self.queue, arr.best

        def step(i: int, sid: int, ln: int) -> Touched:
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

    def _migrate_steps(self, act: list[int]) -> None:
        """Each step aborts the shortest sequence of the replica with the largest T_i, dispatches
        it and keeps the move if the ordered Σ T_i rose by more than MIGRATION_MIN_GAIN. The sum
        is carried as an estimate of the real Σ T_i (plus the T_i changes of the touched
        replicas) with a bound on its error; the ordered sum is computed only when the bound
        cannot decide."""
        b, loads, where, arrivals = self.b, self.loads, self.where, self.arrivals
        n, tok, thr, ver, refresh = loads.n, loads.tok, loads.thr, loads.ver, loads.refresh
        c, u2 = 1 + MIGRATION_MIN_GAIN, 2.0**-52
        # ≥ γ_(R-1): |ordered Σ - real Σ| <= g · real Σ (every T_i >= 0)
        g = 1.01 * len(act) * 2.0**-53
        kept = loads.total(act)
        err = g * kept  # |kept - real Σ T_i of the kept state| <= err
        # the decision margin, from |ordered Σ - est| and |ordered Σ_kept · c - kept · c| (see below)
        w, sk = 1.01 * g + 4 * u2, _SLACK
        heappop, heappush, queue, left = heapq.heappop, heapq.heappush, self.queue, self.left
        arr = loads.arrays
        # when nothing else waits, a step is the fused abort + dispatch
        step = self._fused(arr) if arr is not None and not queue else None
        heap = [(-thr[i], i, ver[i]) for i in act]
        heapq.heapify(heap)
        shortest: dict[int, list[tuple[int, int]]] = {}
        journal: list[tuple[int, int]] | None
        # each kept move raises Σ T_i; N bounds the useful ones
        for _ in range(b.num_sequences + 1):
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
            if step is not None:
                touched = step(i, sid, ln)
                journal = None
            else:
                touched = {i: (n[i], tok[i], thr[i])}
                journal = [(sid, ln)]
                n[i] -= 1  # abort the shortest sequence back to the queue
                tok[i] -= ln
                refresh(i)
                where[sid] = None
                heappush(queue, (b.priority(sid), sid, ln))
                self._dispatch(act, journal, touched)
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
                new_total = loads.total(act)
                stop = new_total <= loads.total_before(act, touched) * (1 + MIGRATION_MIN_GAIN)
                est, est_err = new_total, g * new_total
            if stop:
                loads.undo(touched)
                return
            kept, err = est, est_err
            if err > 4 * g * kept:  # drifted: restart from the ordered sum
                kept = loads.total(act)
                err = g * kept
            for r in touched:
                heappush(heap, (-thr[r], r, ver[r]))
            if journal is None:  # fused: the journal is the aborted sequence alone
                loc = where[sid]
                if loc is not None and loc in shortest:  # an arrival: a candidate for a later abort
                    heappush(shortest[loc], (ln, sid))
                if queue:  # it waits: later steps dispatch it first, as the scheduler
                    step = None
                continue
            for s, sl in journal:  # arrivals become candidates for a later "shortest" abort
                loc = where[s]
                if loc is not None and loc in shortest:
                    heappush(shortest[loc], (sl, s))
