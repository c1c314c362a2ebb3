"""`MicroBatchGuard`: the trainer's answer to a micro-batch that will not fit in device memory.

Why not catch the out-of-memory error itself: under FSDP2 an OOM raised in the middle of one
rank's forward leaves its peers inside the layer all-gathers it never joins, and its next
collective would pair with another layer's. The decoder layers' shards have the same shapes, so
that pairing does not even fail: it silently trains on the wrong weights. A group in that state
can only be torn down, which is the restart the guard exists to avoid.

So the guard asks before each micro-batch, where the ranks are in step: does the micro-batch's
measured need fit in what the device has free now (the driver's free memory plus what torch's
caching allocator holds unused; other processes on the device, a colocated engine, count
against it)? Every rank answers and the ranks agree with one all-reduce of a flag. If any rank
says no, every rank drops the step's gradients, halves the token budget (kept for the rest of the
run, and in the checkpoint), re-plans and runs the step again: the loss is normalised by the
whole batch, so a smaller split changes only the order of the floating-point sums.

The need is measured, never assumed: after each micro-batch of at least half the budget the
guard reads torch's peak allocation over it and keeps the largest bytes per real token seen.
That figure holds a layer's all-gathered parameters too, so it over-states the need of a larger
micro-batch, never under-states it. Until one is measured (the first step after start) there is
nothing to ask with, and an OOM there, or one past an estimate that fell short, still restarts
the job (docs/reliability.md).

On CPU there is no device memory to ask about: the guard does nothing, unless PIVOT_FAULTS asks
for `train_oom` (`pivot.faults`), which makes a rank answer no; the tests and the soak split
steps that way through the real all-reduce, re-plan and retry.
"""

from __future__ import annotations

import logging

import torch
import torch.distributed as dist

from pivot import faults

log = logging.getLogger(__name__)


class OutOfMemoryForOneSequence(RuntimeError):
    """Every micro-batch already holds one sequence and one still does not fit."""


class MicroBatchGuard:
    def __init__(self, budget: int, device: torch.device, group: dist.ProcessGroup) -> None:
        self.budget = budget
        """Real (packed) tokens per micro-batch (`train.micro_batch_tokens`, halved by each split)."""
        self.splits = 0
        """Steps split so far in this run."""
        self.device, self.group = device, group
        # the same on every rank (the device type, the environment): the all-reduce is collective
        self.asks = device.type == "cuda" or faults.ACTIVE
        self.bytes_per_token = 0.0
        """The largest peak allocation per real token measured over a micro-batch (0: none yet)."""
        self._start = 0

    def fits(self, tokens: int) -> bool:
        """Whether every rank can run its next micro-batch of `tokens` real tokens (0: a
        dummy pass). Collective over the group when the guard asks at all."""
        if not self.asks:
            return True
        ok = not faults.happens("train_oom", "train") if faults.ACTIVE else True
        if ok and self.device.type == "cuda" and self.bytes_per_token and tokens:
            free, _ = torch.cuda.mem_get_info(self.device)
            cached = torch.cuda.memory_reserved(self.device) - torch.cuda.memory_allocated(
                self.device
            )
            ok = self.bytes_per_token * tokens <= free + cached
        flag = torch.tensor([int(ok)], dtype=torch.int32, device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=self.group)
        if self.device.type == "cuda":  # from here the peak is this micro-batch's own
            torch.cuda.reset_peak_memory_stats(self.device)
            self._start = torch.cuda.memory_allocated(self.device)
        return bool(flag.item())

    def measured(self, tokens: int) -> None:
        """A micro-batch of `tokens` real tokens finished its backward: keep its need."""
        if self.device.type != "cuda" or tokens < self.budget // 2:
            return  # a small one's fixed part (a layer's all-gather) would inflate the rate
        peak = torch.cuda.max_memory_allocated(self.device) - self._start
        self.bytes_per_token = max(self.bytes_per_token, peak / tokens)

    def split(self, can_split: bool, longest: int) -> None:
        """Some rank's micro-batch did not fit: halve the budget for the rest of the run.
        `can_split`: some micro-batch of the plan holds more than one sequence."""
        if not can_split:
            raise OutOfMemoryForOneSequence(
                f"training ran out of device memory on micro-batches of one sequence each "
                f"(the longest {longest} tokens): give the trainer more devices "
                f"(--train.devices) or shorter responses (--rollout.max-new-tokens)"
            )
        self.budget //= 2
        self.splits += 1
        log.warning(
            "a training micro-batch would not fit in device memory: the step runs again with "
            "micro-batches of at most %d tokens, kept for the rest of the run (%d split(s))",
            self.budget,
            self.splits,
        )
