"""Shift-aware scheduler (paper §6, Algorithms 2-4): one per inference role.

    sched = ShiftAwareScheduler(replicas, active=[0, 1])
    sched.submit(SeqState(7, prompt_len=120))
    cmds = sched.dispatch()                 # [Dispatch(7, r)]
    sched.on_progress(7, generated=40)      # from the monitor
    sched.on_finish(7)
    cmds = sched.shift_down([1])            # Abort all on 1, re-dispatch on the rest
    cmds = sched.shift_up([2, 3])           # fill new replicas, then migrate while Σ T_i grows
    sched.load_state({0: running}, queue)   # bulk adopt + submit (a snapshot's state)

- Waiting queue: a priority queue keyed by `priority(seq)` (default: the seq id), ties by id.
  Dispatch pops the head and sends it to the eligible replica (free KV >= its length) with the
  largest dT (the placement rule, pivot/sched/dispatch.py); if none is eligible the head waits
  (and with it the rest of the queue).
- Every mutating call returns the *net* commands of that call: all `Abort`s first, then all
  `Dispatch`es, each sorted by seq id. A sequence that moved and came back emits nothing.
- Shift up migration: max-heap of replicas by T_i; pop the highest, abort its shortest
  sequence, dispatch the queue; keep the move only if Σ T_i strictly grows, otherwise undo it
  and stop. Cost O(I·N + I log I) (Appendix C.2).
- Deterministic: replicas are scanned in ascending id, so dT ties go to the smallest id.
- `what_if()`: the planner's what-if runs of many candidates over this state (same decisions,
  by pivot/sched/trial.py, an internal detail of this scheduler).
- The state it decides on (where each sequence is, the loads, the queue, the monitor's input
  and the queries) is its `placement` (placement.py); the scheduler forwards the monitor's
  input and the queries, so callers hold the scheduler alone.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pivot.sched.dispatch import best_target
from pivot.sched.placement import Placement
from pivot.sched.records import Command, Replica, SeqState
from pivot.sched.replica_load import ReplicaLoad as _Rep
from pivot.sched.throughput import MIGRATION_MIN_GAIN
from pivot.sched.trial import TrialBase


class ShiftAwareScheduler:
    """Shared waiting queue + throughput-maximising dispatch + shift-time migration."""

    def __init__(
        self,
        replicas: Iterable[Replica],
        active: Iterable[int] | None = None,
        priority: Callable[[SeqState], Any] | None = None,
        migrate: bool = True,
    ) -> None:
        """`active`: ids up now (default all); `priority(seq)`: queue order (default: the id);
        `migrate=False` is the no-migration ablation (shift up only drains the queue onto the
        new replicas)."""
        self.placement = Placement(replicas, active, priority)
        self.migrate = migrate

    def clone(self) -> ShiftAwareScheduler:
        """An independent copy."""
        # no __init__: the placement's copy is already valid, and clones are many (tests, what-ifs)
        new = object.__new__(ShiftAwareScheduler)
        new.placement, new.migrate = self.placement.clone(), self.migrate
        return new

    def what_if(self) -> TrialBase:
        """The planner's what-if runs over the current state: `what_if().run(down, up)` gives the
        throughput (and busy replicas) that `shift_down(down)` then `shift_up(up)` would reach
        on a clone, bit for bit, without cloning per run (pivot/sched/trial.py). It reads this
        scheduler's tables without copying them: do not change the scheduler while using it."""
        p = self.placement
        seqs, heap, where, qver = p.seqs, p.queue, p.where.get, p.qver.get
        if not p.stale:  # as after `load_state`: the heap as it is, (priority, id) orders it
            live = [(q, sid, (s := seqs[sid]).prompt_len + s.generated) for q, sid, _ in heap]
        else:
            live = [
                (q, sid, (s := seqs[sid]).prompt_len + s.generated)
                for q, sid, v in heap
                if where(sid, 0) is None and qver(sid) == v  # `_live`, inlined: planner's hot loop
            ]
            heapq.heapify(live)  # stale entries dropped; (priority, id) still orders the rest
        return TrialBase(list(p.reps.values()), live, seqs, p.priority, self.migrate)

    # ------------------------------------------------------------------ monitor input
    # The placement's, forwarded: the runtime, the simulator and the planner hold the scheduler
    # alone (the same calls as the paper's scheduler, tests/sched/reference_scheduler.py).
    def submit(self, seq: SeqState) -> None:
        """Enqueue a new sequence (call `dispatch` to place it)."""
        self.placement.submit(seq)

    def adopt(self, seq: SeqState, replica_id: int) -> None:
        """Register a sequence already running on an active replica (`Placement.adopt`)."""
        self.placement.adopt(seq, replica_id)

    def load_state(
        self, running: Mapping[int, Iterable[SeqState]], queue: Iterable[SeqState]
    ) -> None:
        """Bulk `adopt` of `running` then `submit` of `queue` (`Placement.load_state`)."""
        self.placement.load_state(running, queue)

    def on_progress(self, seq_id: int, generated: int) -> None:
        """The monitor reports `generated` tokens so far (absolute count) for `seq_id`."""
        self.placement.on_progress(seq_id, generated)

    def on_progress_many(self, progress: Iterable[tuple[int, int]]) -> None:
        """`on_progress` for each (seq_id, generated) pair (`Placement.on_progress_many`)."""
        self.placement.on_progress_many(progress)

    def on_finish(self, seq_id: int) -> None:
        """`seq_id` completed (or was cancelled): forget it, freeing its KV."""
        self.placement.on_finish(seq_id)

    # ------------------------------------------------------------------ queries
    @property
    def replica_ids(self) -> list[int]:
        return self.placement.replica_ids

    @property
    def active_ids(self) -> list[int]:
        return self.placement.active_ids

    def queued(self) -> list[SeqState]:
        """Waiting sequences in dispatch order."""
        return self.placement.queued()

    def running(self, replica_id: int) -> list[SeqState]:
        return self.placement.running(replica_id)

    def load(self, replica_id: int) -> tuple[int, int]:
        """(n_seq, n_tok) of a replica; n_tok is also its KV use."""
        return self.placement.load(replica_id)

    def replica_throughput(self, replica_id: int) -> float:
        return self.placement.replica_throughput(replica_id)

    def throughput(self) -> float:
        """Aggregate modelled throughput Σ T_i over the active replicas."""
        return self.placement.throughput()

    def num_sequences(self) -> int:
        """Running plus queued sequences (the N of the planner's harmonic mean)."""
        return self.placement.num_sequences()

    # ------------------------------------------------------------------ operations
    def dispatch(self) -> list[Command]:
        """Dispatch the queue onto the active replicas (Algorithm 2, Dispatch)."""
        p = self.placement
        p.begin()
        self._dispatch(p.active_reps)
        return p.commands()

    def abort(self, seq_id: int) -> list[Command]:
        """Return a running sequence to the queue with its generated tokens (Algorithm 2)."""
        p = self.placement
        p.known(seq_id, "abort")
        p.begin()
        if p.where[seq_id] is not None:
            p.move(seq_id, None)
        return p.commands()

    def shift_down(self, replica_ids: Iterable[int]) -> list[Command]:
        """Algorithm 3: abort everything on the leaving replicas, dispatch onto the rest."""
        p = self.placement
        leaving = p.check_ids(replica_ids, "shift_down", want_active=True)
        p.begin()
        for rid in leaving:
            for sid in sorted(p.reps[rid].seqs):
                p.move(sid, None)
            p.reps[rid].active = False
        p.sync_active()
        self._dispatch(p.active_reps)
        return p.commands()

    def shift_up(self, replica_ids: Iterable[int]) -> list[Command]:
        """Algorithm 4: dispatch the queue onto the new replicas, then migrate while Σ T_i grows."""
        p = self.placement
        joining = p.check_ids(replica_ids, "shift_up", want_active=False)
        p.begin()
        for rid in joining:
            p.reps[rid].active = True
        p.sync_active()
        self._dispatch([p.reps[rid] for rid in sorted(joining)])
        if self.migrate:
            self._migrate()
        return p.commands()

    # ------------------------------------------------------------------ internals
    def _migrate(self) -> None:
        p = self.placement
        total = p.throughput()
        heap = [(-r.thr, r.rid, r.ver) for r in p.active_reps]
        heapq.heapify(heap)
        shortest: dict[int, list[tuple[int, int]]] = {}
        reps, act = p.reps, p.active_reps
        terms = _terms(act)  # one set of the rule's tables for every step: an abort updates its row
        row = {r.rid: j for j, r in enumerate(act)}
        for _ in range(len(p.seqs) + 1):  # each kept move raises Σ T_i; N bounds the useful ones
            while heap and heap[0][2] != reps[heap[0][1]].ver:
                heapq.heappop(heap)  # stale key
            if not heap:
                return
            _, rid, _ = heapq.heappop(heap)
            rm = reps[rid]
            if rm.n == 0:
                return
            short = shortest.get(rid)
            if short is None:
                short = shortest[rid] = sorted((ln, sid) for sid, ln in rm.seqs.items())
            while short[0][1] not in rm.seqs:  # moved away earlier: drop stale entries
                heapq.heappop(short)
            sid = short[0][1]
            p.journal = []
            p.move(sid, None)
            _set_terms(terms, row[rid], rm)
            self._dispatch(act, terms)
            journal, p.journal = p.journal, None
            changed = {rid}
            changed.update(loc for _, loc in journal if loc is not None)
            changed.update(w for s, _ in journal if (w := p.where[s]) is not None)
            new_total = p.throughput()
            if new_total <= total * (1 + MIGRATION_MIN_GAIN):
                for s, loc in reversed(journal):
                    p.move(s, loc)
                return  # (the tables are dropped with the undone loads)
            total = new_total
            for c in changed:
                r = reps[c]
                heapq.heappush(heap, (-r.thr, r.rid, r.ver))
            for s, _ in journal:  # arrivals become candidates for a later "shortest" abort
                loc = p.where[s]
                if loc is not None and loc in shortest:
                    heapq.heappush(shortest[loc], (reps[loc].seqs[s], s))

    def _dispatch(self, targets: list[_Rep], terms: _Terms | None = None) -> None:
        # Hot loop of dispatch and migration: the head goes where the placement rule says
        # (dispatch.best_target over `terms`, the targets' terms by position: the caller's, or
        # built at the first live head; kept current here), the queue-to-replica move is inlined
        # (same effect as placement.move(sid, best.rid)), stale heap entries are dropped on the way.
        p = self.placement
        q, seqs, where, qver, orig, journal = p.queue, p.seqs, p.where, p.qver, p.orig, p.journal
        pos = range(len(targets))
        while q:
            _, sid, ver = q[0]
            if where.get(sid, 0) is not None or qver.get(sid) != ver:
                heapq.heappop(q)
                p.stale -= 1
                continue
            seq = seqs[sid]
            ln = seq.prompt_len + seq.generated
            if terms is None:
                terms = _terms(targets)
            A, n1, base, thr, free = terms
            j = best_target(ln, pos, A, n1, base, thr, free)
            if j < 0:
                return  # the head waits for capacity
            best = targets[j]
            heapq.heappop(q)
            if sid not in orig:
                orig[sid] = None
            if journal is not None:
                journal.append((sid, None))
            qver[sid] = ver + 2  # as _take + move: its queue entry is gone
            where[sid] = best.rid
            best.seqs[sid] = ln
            best.n += 1
            best.tok += ln
            best.refresh()
            _set_terms(terms, j, best)


_Terms = tuple[list[float], list[int], list[float], list[float], list[int]]


def _terms(reps: list[_Rep]) -> _Terms:
    """(A, n1, base, thr, free) of `reps` by position: the tables of the placement rule."""
    return (
        [r.A for r in reps],
        [r.n1 for r in reps],
        [r.base for r in reps],
        [r.thr for r in reps],
        [r.free for r in reps],
    )


def _set_terms(terms: _Terms, j: int, r: _Rep) -> None:
    """Row `j` of `terms` after replica `r`'s load changed."""
    _, n1, base, thr, free = terms
    n1[j], base[j], thr[j], free[j] = r.n1, r.base, r.thr, r.free
