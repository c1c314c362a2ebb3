"""Test oracle: the shift-aware scheduler written from the paper alone, plain and slow.

Sources: §6.1 (T_i, ΔT_i, the shared queue, dispatch to the eligible replica with the largest
ΔT_i), §6.2 and Appendix C.1 (Algorithm 2: Abort, Dispatch; Algorithm 3: shift down;
Algorithm 4: shift up with migration), footnote 3 (priority: ascending sequence id) and the
paper's formulas as docs/ARCHITECTURE.md quotes them (pivot/sched/). It shares no code with
pivot/sched/scheduler.py or trial*.py.

Where the pseudocode leaves a choice open, the rule below is the one the production docstrings
(pivot/sched/) document, each marked "Rule" at its place:
- ties (equal ΔT_i, equal T_i, equal lengths) go to the smallest replica / sequence id;
- a head that fits nowhere blocks the queue ("the sequence remains in the shared queue");
- migration stops when Σ T_i does not rise by more than a relative 1e-12, and that last
  move is undone (Algorithm 4 breaks after it; the text: "until no further migration can
  improve the aggregate throughput");
- each step aborts from the replica with the largest *current* T_i (the text; the
  pseudocode's heap re-inserts only r_M, which would leave its receivers' keys stale);
- at most N^Seq + 1 migration steps (Appendix C.2's bound on migration operations).
Commands are the net change of each call: Aborts (from the first replica), then Dispatches
(to the final one), each by sequence id.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable
from typing import Any

from pivot.sched.records import Abort, Command, Dispatch, Replica, SeqState

REL_EPS = 1e-12  # Rule: a migration must raise Σ T_i by more than float noise


def replica_throughput(m: Any, n: int, tok: int) -> float:
    """§6.1: T_i = N_i^Seq / (A * N_i^Token + max(B, C * N_i^Seq) + D)."""
    return n / (m.A * tok + max(m.B, m.C * n) + m.D) if n else 0.0


def throughput_gain(m: Any, n: int, tok: int, length: int) -> float:
    """§6.1: ΔT_i of adding one sequence of `length` tokens."""
    return (n + 1) / (m.A * (tok + length) + max(m.B, m.C * (n + 1)) + m.D) - replica_throughput(
        m, n, tok
    )


class ShiftAwareScheduler:
    def __init__(
        self,
        replicas: Iterable[Replica],
        active: Iterable[int] | None = None,
        priority: Callable[[SeqState], Any] | None = None,
        migrate: bool = True,
    ) -> None:
        self.specs = {r.replica_id: r for r in sorted(replicas, key=lambda r: r.replica_id)}
        self.active = set(self.specs if active is None else active)
        self.priority = priority or (lambda s: s.seq_id)  # footnote 3: ascending sequence id
        self.migrate = migrate
        self.seqs: dict[int, SeqState] = {}
        self.where: dict[int, int | None] = {}  # sequence -> replica, None while queued
        self.on: dict[int, dict[int, None]] = {
            rid: {} for rid in self.specs
        }  # replica -> its sequences
        self.tok = dict.fromkeys(self.specs, 0)  # N_i^Token: KV tokens held
        self.queue: list[tuple[Any, int]] = []  # (priority, id), kept sorted
        self.key: dict[int, Any] = {}  # priority of each queued sequence, taken when it joined
        self.log: list[tuple[int, int | None]] = []  # (sequence, previous place) of every move

    # ---------------------------------------------------------------- reads
    replica_ids = property(lambda self: sorted(self.specs))
    active_ids = property(lambda self: sorted(self.active))

    def queued(self) -> list[SeqState]:
        return [self.seqs[sid] for _, sid in self.queue]

    def running(self, rid: int) -> list[SeqState]:
        return [self.seqs[sid] for sid in sorted(self.on[rid])]

    def load(self, rid: int) -> tuple[int, int]:
        return len(self.on[rid]), self.tok[rid]

    def replica_throughput(self, rid: int) -> float:
        return replica_throughput(self.specs[rid].model, *self.load(rid))

    def throughput(self) -> float:
        return sum(self.replica_throughput(rid) for rid in self.active_ids)

    def num_sequences(self) -> int:
        return len(self.seqs)

    def clone(self) -> ShiftAwareScheduler:
        new = ShiftAwareScheduler(self.specs.values(), self.active, self.priority, self.migrate)
        new.seqs, new.where, new.tok, new.queue = (
            dict(self.seqs),
            dict(self.where),
            dict(self.tok),
            list(self.queue),
        )
        new.on, new.key = {rid: dict(s) for rid, s in self.on.items()}, dict(self.key)
        return new

    # ---------------------------------------------------------------- monitor input
    def submit(self, seq: SeqState) -> None:
        self.seqs[seq.seq_id], self.where[seq.seq_id] = seq, None
        self._enqueue(seq.seq_id)

    def adopt(self, seq: SeqState, rid: int) -> None:
        self.seqs[seq.seq_id], self.where[seq.seq_id] = seq, rid
        self.on[rid][seq.seq_id] = None
        self.tok[rid] += seq.length

    def on_progress(self, sid: int, generated: int) -> None:
        old, rid = self.seqs[sid], self.where[sid]
        self.seqs[sid] = SeqState(sid, old.prompt_len, generated)
        if rid is not None:
            self.tok[rid] += generated - old.generated

    def on_finish(self, sid: int) -> None:
        self._move(sid, None)
        self.queue.remove((self.key.pop(sid), sid))
        del self.seqs[sid], self.where[sid]

    # ---------------------------------------------------------------- operations
    def dispatch(self) -> list[Command]:
        return self._net(lambda: self._dispatch(self.active_ids))

    def abort(self, sid: int) -> list[Command]:
        return self._net(lambda: self._move(sid, None))

    def shift_down(self, rids: Iterable[int]) -> list[Command]:
        """Algorithm 3: Abort(r, All) for every leaving replica, then Dispatch(Q, R')."""

        def run() -> None:
            for rid in sorted(set(rids)):
                for sid in sorted(self.on[rid]):
                    self._move(sid, None)
                self.active.discard(rid)
            self._dispatch(self.active_ids)

        return self._net(run)

    def shift_up(self, rids: Iterable[int]) -> list[Command]:
        """Algorithm 4: Dispatch(Q, R↑), then migrate over R = R↑ ∪ R' while Σ T_i rises."""

        def run() -> None:
            self.active |= set(rids)
            self._dispatch(sorted(set(rids)))
            if self.migrate:
                self._migrate()

        return self._net(run)

    # ---------------------------------------------------------------- Algorithms 2 and 4
    def _dispatch(self, targets: list[int]) -> None:
        """Algorithm 2, Dispatch: the head goes to the replica with sufficient KV capacity and the
        largest ΔT_i (Rule: ties to the smallest id); if none has room the queue waits."""
        while self.queue:
            sid = self.queue[0][1]
            length = self.seqs[sid].length
            best, best_gain = None, 0.0
            for rid in targets:
                if self.specs[rid].kv_capacity - self.tok[rid] >= length:
                    gain = throughput_gain(
                        self.specs[rid].model, len(self.on[rid]), self.tok[rid], length
                    )
                    if best is None or gain > best_gain:
                        best, best_gain = rid, gain
            if best is None:
                return
            self._move(sid, best)

    def _migrate(self) -> None:
        """Algorithm 4, lines 6-18: abort the shortest sequence of the replica with the largest
        T_i, dispatch, keep the move while Σ T_i rises (Rules above)."""
        total = self.throughput()
        for _ in range(len(self.seqs) + 1):
            top = min(self.active_ids, key=lambda rid: (-self.replica_throughput(rid), rid))
            if not self.on[top]:
                return
            shortest = min(self.on[top], key=lambda sid: (self.seqs[sid].length, sid))
            mark = len(self.log)
            self._move(shortest, None)
            self._dispatch(self.active_ids)
            new_total = self.throughput()
            if new_total <= total * (1 + REL_EPS):
                for sid, back in reversed(self.log[mark:]):  # undo the step, newest move first
                    self._move(sid, back)
                return
            total = new_total

    # ---------------------------------------------------------------- bookkeeping
    def _move(self, sid: int, dest: int | None) -> None:
        """Move a sequence between the queue (None) and a replica, keeping its tokens."""
        src = self.where[sid]
        if src == dest:
            return
        seq = self.seqs[sid]
        if src is None:
            self.queue.remove((self.key.pop(sid), sid))
        else:
            del self.on[src][sid]
            self.tok[src] -= seq.length
        if dest is None:
            self._enqueue(sid)
        else:
            self.on[dest][sid] = None
            self.tok[dest] += seq.length
        self.where[sid] = dest
        self.log.append((sid, src))

    def _enqueue(self, sid: int) -> None:
        self.key[sid] = self.priority(self.seqs[sid])
        bisect.insort(self.queue, (self.key[sid], sid))

    def _net(self, run: Callable[[], None]) -> list[Command]:
        before = dict(self.where)
        self.log = []
        run()
        moved = sorted(sid for sid, rid in before.items() if self.where[sid] != rid)
        return [Abort(sid, before[sid]) for sid in moved if before[sid] is not None] + [
            Dispatch(sid, self.where[sid]) for sid in moved if self.where[sid] is not None
        ]
