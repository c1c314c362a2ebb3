"""`Placement`: where each sequence of one inference role is, on a replica slot or in the
shared waiting queue, kept current by the monitor's input (`submit`, `adopt`, `load_state`,
`on_progress`, `on_finish`), with the queries the runtime and the planner read (loads, T_i,
Σ T_i, queue order). `ShiftAwareScheduler` (scheduler.py) holds one and makes the decisions:
dispatch, abort, shift down and shift up with migration. Its tables (`reps`, `seqs`, `where`,
`qver`, `queue`, `stale`, `orig`, `journal`, `active_reps`) and the bookkeeping below are public
for those decisions, whose hot loops read and update them in place; everyone else goes through
the queries and the monitor input.

- Each slot's load and T_i terms are a `ReplicaLoad` (replica_load.py).
- Waiting queue: a heap of (priority(seq), id, version) with lazy deletion: an entry is live
  while its sequence is queued and the version matches (`_live`); priority ties go by id.
- `move` is the one general way a sequence changes place: it records each moved sequence's
  first place for the net commands of a call (`begin` ... `commands`) and journals the moves
  of a tentative migration step so that it can be undone.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Self

from pivot.sched.records import Abort, Command, Dispatch, Replica, SeqState
from pivot.sched.replica_load import ReplicaLoad as _Rep


class Placement:
    """Replica loads + waiting queue of one role, and the bookkeeping of every move."""

    def __init__(
        self,
        replicas: Iterable[Replica],
        active: Iterable[int] | None = None,
        priority: Callable[[SeqState], Any] | None = None,
    ) -> None:
        """`active`: ids up now (default all); `priority(seq)`: queue order (default: the id)."""
        specs = sorted(replicas, key=lambda r: r.replica_id)
        ids = [r.replica_id for r in specs]
        if len(set(ids)) != len(ids):
            raise ValueError(f"{type(self).__name__}: duplicate replica ids in {ids}")
        for spec in specs:
            if spec.model is None:
                raise ValueError(
                    f"{type(self).__name__}: replica {spec.replica_id} has no throughput model"
                )
        on = set(ids) if active is None else set(active)
        if not on <= set(ids):
            raise ValueError(
                f"{type(self).__name__}: unknown active replicas {sorted(on - set(ids))}"
            )
        self._specs = {r.replica_id: r for r in specs}
        self.reps = {r.replica_id: _Rep(r, r.replica_id in on) for r in specs}
        self.priority = priority or (lambda s: s.seq_id)
        self.seqs: dict[int, SeqState] = {}
        self.where: dict[int, int | None] = {}  # None: queued
        self.qver: dict[int, int] = {}
        self.queue: list[tuple[Any, int, int]] = []  # (priority, seq id, version): lazy deletion
        self.stale = 0  # entries of `queue` that are not `_live`: none, and a scan can skip it
        self.orig: dict[int, int | None] = {}  # first location of each seq moved in this call
        self.journal: list[tuple[int, int | None]] | None = None  # undo log of a tentative move
        self.active_reps: list[_Rep] = []
        self.sync_active()

    # ------------------------------------------------------------------ queries
    @property
    def replica_ids(self) -> list[int]:
        return list(self.reps)

    @property
    def active_ids(self) -> list[int]:
        return [r.rid for r in self.active_reps]

    def spec(self, replica_id: int) -> Replica:
        return self._specs[replica_id]

    def queued(self) -> list[SeqState]:
        """Waiting sequences in dispatch order."""
        where, qver, seqs, live = self.where.get, self.qver.get, self.seqs, self.queue
        if self.stale:
            live = [e for e in live if where(e[1], 0) is None and qver(e[1]) == e[2]]  # _live
        return [seqs[sid] for _, sid, _ in sorted(live)]

    def running(self, replica_id: int) -> list[SeqState]:
        return [self.seqs[s] for s in sorted(self.reps[replica_id].seqs)]

    def location(self, seq_id: int) -> int | None:
        """Replica running `seq_id`, or None while it waits in the queue."""
        return self.where[seq_id]

    def load(self, replica_id: int) -> tuple[int, int]:
        """(n_seq, n_tok) of a replica; n_tok is also its KV use."""
        r = self.reps[replica_id]
        return r.n, r.tok

    def replica_throughput(self, replica_id: int) -> float:
        return self.reps[replica_id].thr

    def throughput(self) -> float:
        """Aggregate modelled throughput Σ T_i over the active replicas."""
        return sum(r.thr for r in self.active_reps)

    def num_sequences(self) -> int:
        """Running plus queued sequences (the N of the planner's harmonic mean)."""
        return len(self.seqs)

    def clone(self) -> Self:
        """An independent copy."""
        new = object.__new__(type(self))
        new._specs, new.priority = self._specs, self.priority
        new.reps = {}
        for rid, r in self.reps.items():
            c = object.__new__(_Rep)
            for k in _Rep.__slots__:
                setattr(c, k, getattr(r, k))
            c.seqs = dict(r.seqs)
            new.reps[rid] = c
        new.seqs = dict(
            self.seqs
        )  # SeqState objects are shared: on_progress replaces, never mutates
        new.where, new.qver, new.queue = dict(self.where), dict(self.qver), list(self.queue)
        new.stale = self.stale
        new.orig, new.journal, new.active_reps = {}, None, []
        new.sync_active()
        return new

    # ------------------------------------------------------------------ monitor input
    def submit(self, seq: SeqState) -> None:
        """Enqueue a new sequence (call `dispatch` to place it)."""
        if seq.seq_id in self.seqs:
            raise ValueError(f"submit: sequence {seq.seq_id} is already known")
        self.seqs[seq.seq_id] = SeqState(seq.seq_id, seq.prompt_len, seq.generated)
        self.where[seq.seq_id] = None
        self._enqueue(seq.seq_id)

    def adopt(self, seq: SeqState, replica_id: int) -> None:
        """Register a sequence already running on an active replica (mirrors the runtime's
        state; emits nothing and skips the KV check, since it is a fact, not a decision)."""
        if seq.seq_id in self.seqs:
            raise ValueError(f"adopt: sequence {seq.seq_id} is already known")
        if replica_id not in self.reps or not self.reps[replica_id].active:
            raise ValueError(
                f"adopt: sequence {seq.seq_id} on unknown or inactive replica {replica_id}"
            )
        self.seqs[seq.seq_id] = SeqState(seq.seq_id, seq.prompt_len, seq.generated)
        self.where[seq.seq_id] = None
        self.move(seq.seq_id, replica_id)
        self.orig.pop(seq.seq_id, None)

    def load_state(
        self, running: Mapping[int, Iterable[SeqState]], queue: Iterable[SeqState]
    ) -> None:
        """Bulk load: `adopt` every sequence of `running` (replica id -> its sequences) on its
        replica, then `submit` every sequence of `queue`; the planner mirrors thousands of
        sequences per call. Same state as the one-by-one calls, except that the `SeqState`
        objects are kept, not copied (the scheduler never mutates one: `on_progress` replaces
        it), so callers must not mutate them afterwards either."""
        seqs, where, qver, prio = self.seqs, self.where, self.qver, self.priority
        for rid, group in running.items():
            r = self.reps.get(rid)
            if r is None or not r.active:
                raise ValueError(f"adopt: sequences on unknown or inactive replica {rid}")
            group = tuple(group)
            ids = [s.seq_id for s in group]
            lens = [s.prompt_len + s.generated for s in group]
            before = len(seqs)
            seqs.update(zip(ids, group))
            if len(seqs) != before + len(group):
                self._duplicate(ids, "adopt")
            where.update(dict.fromkeys(ids, rid))
            qver.update(dict.fromkeys(ids, 2))
            r.seqs.update(zip(ids, lens))
            r.n += len(group)
            r.tok += sum(lens)
            r.refresh()
        group = tuple(queue)
        ids = [s.seq_id for s in group]
        before = len(seqs)
        seqs.update(zip(ids, group))
        if len(seqs) != before + len(group):
            self._duplicate(ids, "submit")
        where.update(dict.fromkeys(ids))
        qver.update(dict.fromkeys(ids, 1))
        heap = self.queue
        heap.extend([(prio(s), s.seq_id, 1) for s in group])
        heapq.heapify(heap)  # same pop order as pushing one by one: (priority, id) is a total order

    def _duplicate(self, ids: list[int], what: str) -> None:
        seen: set[int] = set()
        for sid in ids:
            if sid in seen:
                raise ValueError(f"{what}: sequence {sid} is already known")
            seen.add(sid)
        raise ValueError(
            f"{what}: sequence {next(s for s in ids if s in self.where)} is already known"
        )

    def on_progress(self, seq_id: int, generated: int) -> None:
        """The monitor reports `generated` tokens so far (absolute count) for `seq_id`."""
        self.on_progress_many(((seq_id, generated),))

    def on_progress_many(self, progress: Iterable[tuple[int, int]]) -> None:
        """`on_progress` for each (seq_id, generated) pair, each touched replica's terms
        recomputed once at the end instead of once per sequence (the monitor and the simulator
        report a whole replica at a time; the terms depend only on the final n and tok, so the
        state is the same)."""
        seqs, where, reps = self.seqs, self.where, self.reps
        touched: dict[int, _Rep] = {}
        try:
            for seq_id, generated in progress:
                seq = seqs.get(seq_id)  # `known`, inlined: once per running sequence per step
                if seq is None:
                    raise KeyError(f"on_progress: unknown sequence {seq_id}")
                if generated < 0:
                    raise ValueError(
                        f"on_progress: sequence {seq_id} negative generated={generated}"
                    )
                rid = where[seq_id]
                if rid is not None:
                    r = touched[rid] = reps[rid]
                    r.tok += generated - seq.generated
                    r.seqs[seq_id] = seq.prompt_len + generated
                seqs[seq_id] = SeqState(seq_id, seq.prompt_len, generated)
        finally:  # a bad pair leaves the pairs before it applied, as one call each would
            for r in touched.values():
                r.refresh()

    def on_finish(self, seq_id: int) -> None:
        """`seq_id` completed (or was cancelled): forget it, freeing its KV."""
        self.known(seq_id, "on_finish")
        self._take(seq_id)
        del self.seqs[seq_id], self.where[seq_id]
        self.qver.pop(seq_id, None)

    def move(self, sid: int, loc: int | None) -> None:
        """Move a sequence between the queue (None) and a replica, journaling the change."""
        old = self.where[sid]
        if old == loc:
            return
        self.orig.setdefault(sid, old)
        if self.journal is not None:
            self.journal.append((sid, old))
        self._take(sid)
        if loc is None:
            self.where[sid] = None
            self._enqueue(sid)
        else:
            seq = self.seqs[sid]
            ln = seq.prompt_len + seq.generated
            r = self.reps[loc]
            r.seqs[sid] = ln
            r.n += 1
            r.tok += ln
            r.refresh()
            self.where[sid] = loc
            self.qver[sid] = self.qver.get(sid, 0) + 1  # its queue entry (if any) goes stale

    def _take(self, sid: int) -> None:
        """Detach a sequence from its replica or invalidate its queue entry."""
        rid = self.where[sid]
        if rid is None:
            self.qver[sid] = self.qver.get(sid, 0) + 1
            self.stale += 1
            return
        r = self.reps[rid]
        r.tok -= r.seqs.pop(sid)
        r.n -= 1
        r.refresh()

    def _enqueue(self, sid: int) -> None:
        ver = self.qver.get(sid, 0) + 1
        self.qver[sid] = ver
        heapq.heappush(self.queue, (self.priority(self.seqs[sid]), sid, ver))

    def _live(self, entry: tuple[Any, int, int]) -> bool:
        sid = entry[1]
        return self.where.get(sid, 0) is None and self.qver.get(sid) == entry[2]

    def begin(self) -> None:
        """Start a call whose net commands `commands` returns."""
        self.orig = {}

    def commands(self) -> list[Command]:
        """The net commands of the call since `begin`: aborts, then dispatches, by seq id."""
        moved = sorted(
            (sid, old) for sid, old in self.orig.items() if self.where.get(sid, old) != old
        )
        self.orig = {}
        aborts: list[Command] = [Abort(sid, old) for sid, old in moved if old is not None]
        return aborts + [
            Dispatch(sid, rid) for sid, _ in moved if (rid := self.where.get(sid)) is not None
        ]

    def sync_active(self) -> None:
        """Recompute `active_reps` after replicas' `active` flags changed."""
        self.active_reps = [r for r in self.reps.values() if r.active]  # dict is in ascending id

    def check_ids(self, replica_ids: Iterable[int], what: str, want_active: bool) -> list[int]:
        """`replica_ids` sorted, each known and (not) active as `want_active` says; else a
        ValueError naming `what`."""
        ids = sorted(set(replica_ids))
        for rid in ids:
            if rid not in self.reps:
                raise ValueError(f"{what}: unknown replica {rid}")
            if self.reps[rid].active != want_active:
                raise ValueError(f"{what}: replica {rid} is {'not ' if want_active else ''}active")
        return ids

    def known(self, seq_id: int, what: str) -> SeqState:
        """The sequence `seq_id`; a KeyError naming `what` if it is not known."""
        if seq_id not in self.seqs:
            raise KeyError(f"{what}: unknown sequence {seq_id}")
        return self.seqs[seq_id]
