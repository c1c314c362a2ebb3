"""Continuous-batching scheduler: which sequences run this step, and how many tokens each.

Pure Python. Every step it (1) keeps every running sequence going (one decode token, or the
next prefill chunk), preempting the newest running sequence by recompute when the KV cache
is full, then (2) admits waiting sequences in arrival order while the running-sequence cap,
the prefill-token budget and the free blocks allow. An admitted sequence starts after the
longest cached prefix it shares (`BlockManager.match`); one whose prefix is being computed
this step waits for it while later sequences are admitted. One that arrived with its K/V
(migrated, already holding blocks) starts after them.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from pivot.engine.block_manager import BlockManager
from pivot.engine.sequence import SeqStatus, Sequence


@dataclass
class ScheduledSeq:
    seq: Sequence
    start: int
    """First token position computed this step (== seq.num_computed)."""
    num_tokens: int

    @property
    def samples(self) -> bool:
        """Whether this chunk reaches the sequence's end, so a new token is sampled."""
        return self.start + self.num_tokens == len(self.seq.token_ids)


class Scheduler:
    def __init__(
        self, blocks: BlockManager, max_running_seqs: int, max_prefill_tokens: int
    ) -> None:
        self.blocks = blocks
        self.max_running_seqs = max_running_seqs
        self.max_prefill_tokens = max_prefill_tokens
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self.prefill_tokens = 0
        """Prefill tokens computed (`commit`)."""
        self.prefix_hit_tokens = 0
        """Prefill tokens reused from the cache at admission."""
        self.reprefill_tokens = 0
        """Prefill tokens of sequences recomputing K/V they had before (`Sequence.recompute`)."""

    def add(self, seq: Sequence) -> None:
        seq.status = SeqStatus.WAITING
        self.waiting.append(seq)

    def sequences(self) -> list[Sequence]:
        return self.running + list(self.waiting)

    def remove(self, seq: Sequence) -> None:
        """Drop `seq` (finished or aborted) and free its blocks."""
        if seq.status is SeqStatus.RUNNING:
            self.running.remove(seq)
        elif seq.status is SeqStatus.WAITING:
            self.waiting.remove(seq)
        self.blocks.free(seq)
        seq.num_computed = 0

    def schedule(self) -> list[ScheduledSeq]:
        budget = self.max_prefill_tokens
        plan: list[ScheduledSeq] = []
        self.running.sort(key=lambda s: s.arrival)
        i = 0
        while i < len(self.running):
            seq = self.running[i]
            n = seq.num_uncomputed
            if n > 1:  # unfinished prefill: next chunk
                n = min(n, budget)
                if n == 0:
                    i += 1
                    continue
            if not self.blocks.allocate(seq, seq.num_computed + n):
                self._preempt(self.running[-1])  # newest goes back to waiting, recomputed later
                if seq.status is not SeqStatus.RUNNING:  # preempted itself
                    break
                continue
            if n > 1 or seq.num_computed == 0:
                budget -= n
            plan.append(ScheduledSeq(seq, seq.num_computed, n))
            i += 1
        plan = [p for p in plan if p.seq.status is SeqStatus.RUNNING]
        i = 0
        while i < len(self.waiting) and len(self.running) < self.max_running_seqs and budget > 0:
            seq = self.waiting[i]
            if seq.id in self.blocks.tables:  # placed with migrated K/V: continue after them
                if not self._admit_placed(seq, budget, plan):
                    break
                del self.waiting[i]
                budget -= plan[-1].num_tokens
                continue
            match = self.blocks.match(seq)
            if match is None:  # its prefix is being computed: reuse it next step
                i += 1
                continue
            n = min(len(seq.token_ids) - match.num_tokens, budget)
            if not self.blocks.allocate(seq, match.num_tokens + n, match):
                break
            del self.waiting[i]
            seq.status = SeqStatus.RUNNING
            seq.num_computed, seq.prefill_end = match.num_tokens, len(seq.token_ids)
            self.prefix_hit_tokens += match.num_tokens
            self.running.append(seq)
            plan.append(ScheduledSeq(seq, seq.num_computed, n))
            budget -= n
        return plan

    def _admit_placed(self, seq: Sequence, budget: int, plan: list[ScheduledSeq]) -> bool:
        """Admit a sequence whose first `num_computed` tokens' K/V were imported
        (pivot/engine/kv_export.py): only the rest is computed, and a lone last token is decode."""
        start, length = seq.num_computed, len(seq.token_ids)
        n = min(length - start, budget)
        if not self.blocks.allocate(seq, start + n):
            return False
        seq.status = SeqStatus.RUNNING
        seq.prefill_end = length if length - start > 1 else start
        self.running.append(seq)
        plan.append(ScheduledSeq(seq, start, n))
        return True

    def commit(self, plan: list[ScheduledSeq]) -> None:
        """The step ran: its tokens' K/V are in the cache."""
        for p in plan:
            seq, end = p.seq, p.start + p.num_tokens
            seq.num_computed = end
            self.blocks.commit(seq, p.start, p.num_tokens)
            if p.start < seq.prefill_end:
                k = min(end, seq.prefill_end) - p.start
                self.prefill_tokens += k
                self.reprefill_tokens += k if seq.recompute else 0

    def _preempt(self, seq: Sequence) -> None:
        seq.recompute = True
        self.running.remove(seq)
        self.blocks.free(seq)
        seq.num_computed = 0
        seq.status = SeqStatus.WAITING
        self.waiting.appendleft(seq)

    def free_tokens_for_admission(self) -> int:
        """Free KV tokens left after the waiting sequences' prompts are placed."""
        pending = sum(self.blocks.extra_blocks(s.id, len(s.token_ids)) for s in self.waiting)
        return (self.blocks.num_free_blocks - pending) * self.blocks.block_size
