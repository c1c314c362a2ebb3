"""Tail lanes: the last sequences of the oldest step get replicas of their own.

A step trains once its last sample is rewarded, so its last few sequences (long responses, long
judges) set when it trains and, through the staleness bound, when later steps are released. On a
replica shared with younger steps' sequences each of them decodes at the crowded replica's step
latency `A * tok + max(B, C * n) + D`; alone on fewer, emptier replicas they decode faster. Once
the oldest step present in a role has at most `tail_seqs` sequences left, `TailLaneScheduler`
picks up to `lane_share` of the active replicas as lanes (those already holding most of the tail,
ties by the least KV), moves the tail onto them (balanced by KV) and every other sequence off
them, and dispatches the rest of the queue onto the other replicas only. A move keeps its KV
under `planner.kv_migration` (otherwise the destination re-prefills). Everything else is
`ShiftAwareScheduler`'s (the planner's what-if runs use its rule: lanes are a dispatch policy).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from pivot.sched.records import STEP_ID_SHIFT, Command, Replica, SeqState
from pivot.sched.scheduler import ShiftAwareScheduler


class TailLaneScheduler(ShiftAwareScheduler):
    def __init__(
        self,
        replicas: Iterable[Replica],
        active: Iterable[int] | None = None,
        priority: Callable[[SeqState], Any] | None = None,
        migrate: bool = True,
        tail_seqs: int = 16,
        lane_share: float = 0.125,
        lane_kv_share: float = 1.0,
    ) -> None:
        """`tail_seqs`: the oldest step's sequences left in this role at which lanes open;
        `lane_share`: most lanes as a share of the active replicas (at least one);
        `lane_kv_share`: the share of a lane's KV the tail should fill, which sets how many lanes
        are opened (within `lane_share`): a step's latency grows with the KV it reads."""
        if tail_seqs < 1:
            raise ValueError(f"TailLaneScheduler: tail_seqs={tail_seqs}: must be >= 1")
        if not 0 < lane_share < 1:
            raise ValueError(f"TailLaneScheduler: lane_share={lane_share}: must be in (0, 1)")
        if not 0 < lane_kv_share <= 1:
            raise ValueError(f"TailLaneScheduler: lane_kv_share={lane_kv_share}: must be in (0, 1]")
        super().__init__(replicas, active, priority, migrate)
        self.tail_seqs, self.lane_share = tail_seqs, lane_share
        self.lane_kv_share = lane_kv_share
        self._by_step: dict[int, set[int]] = {}
        self.lanes: list[int] = []
        """Replica ids serving as lanes after the last dispatch (empty: none)."""

    def clone(self) -> TailLaneScheduler:
        new = super().clone()
        new.tail_seqs, new.lane_share = self.tail_seqs, self.lane_share
        new.lane_kv_share = self.lane_kv_share
        new._by_step = {k: set(v) for k, v in self._by_step.items()}
        new.lanes = list(self.lanes)
        return new

    # the per-step index follows every way a sequence is added or forgotten
    def submit(self, seq: SeqState) -> None:
        super().submit(seq)
        self._by_step.setdefault(seq.seq_id >> STEP_ID_SHIFT, set()).add(seq.seq_id)

    def adopt(self, seq: SeqState, replica_id: int) -> None:
        super().adopt(seq, replica_id)
        self._by_step.setdefault(seq.seq_id >> STEP_ID_SHIFT, set()).add(seq.seq_id)

    def load_state(
        self, running: Mapping[int, Iterable[SeqState]], queue: Iterable[SeqState]
    ) -> None:
        running = {rid: tuple(g) for rid, g in running.items()}
        queue = tuple(queue)
        super().load_state(running, queue)
        for seq in [s for g in running.values() for s in g] + list(queue):
            self._by_step.setdefault(seq.seq_id >> STEP_ID_SHIFT, set()).add(seq.seq_id)

    def on_finish(self, seq_id: int) -> None:
        super().on_finish(seq_id)
        step = seq_id >> STEP_ID_SHIFT
        ids = self._by_step.get(step)
        if ids is not None:
            ids.discard(seq_id)
            if not ids:
                del self._by_step[step]

    def dispatch(self) -> list[Command]:
        self._begin()
        lanes = self._relane()
        self._dispatch([r for r in self._active if r.rid not in lanes] if lanes else self._active)
        return self._commands()

    def _relane(self) -> set[int]:
        """Open, keep or close the lanes; returns the lane ids (empty: no tail now)."""
        self.lanes = []
        if len(self._active) < 2 or not self._by_step:
            return set()
        tail = self._by_step[min(self._by_step)]
        if len(tail) > self.tail_seqs:
            return set()
        reps = self._reps
        held: dict[int, int] = {}
        for sid in tail:
            rid = self._where[sid]
            if rid is not None and reps[rid].active:
                held[rid] = held.get(rid, 0) + 1
        need = sum(self._seqs[sid].length for sid in tail)
        budget = self.lane_kv_share * max(r.cap for r in self._active)
        k = min(
            len(tail),
            max(1, math.ceil(need / budget)),
            max(1, math.floor(self.lane_share * len(self._active))),
        )
        order = sorted(self._active, key=lambda r: (-held.get(r.rid, 0), r.tok, r.rid))
        lanes = [r.rid for r in order[:k]]
        lane_set = set(lanes)
        for rid in lanes:  # every other sequence leaves the lanes (back to the queue)
            for sid in [s for s in reps[rid].seqs if s not in tail]:
                self._move(sid, None)
        for sid in sorted(tail):
            if self._where[sid] in lane_set:
                continue
            ln = self._seqs[sid].length
            fits = [rid for rid in lanes if reps[rid].free >= ln]
            if fits:
                self._move(sid, min(fits, key=lambda rid: (reps[rid].tok, rid)))
        self.lanes = lanes
        return lane_set
