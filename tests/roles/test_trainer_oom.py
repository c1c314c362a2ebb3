"""A training micro-batch that would not fit in device memory (`pivot.roles.oom_guard`): the ranks
agree, the step runs again with half the token budget, to the same weights a run at that budget
from the start makes; the budget is kept in the checkpoint; a split that cannot help says so."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from test_trainer import assert_same, config, make_batch
from trainer_harness import spawn, tiny_model

from pivot import faults
from pivot.rl.logprobs import plan_micro_batches
from pivot.roles.oom_guard import MicroBatchGuard, OutOfMemoryForOneSequence
from pivot.roles.trainer import Trainer


def test_on_cpu_without_faults_the_guard_asks_nothing_and_halves_on_a_split() -> None:
    guard = MicroBatchGuard(4096, torch.device("cpu"), group=None)  # type: ignore[arg-type]
    assert not guard.asks and guard.fits(10**9)  # no collective: no group needed
    guard.split(can_split=True, longest=300)
    assert (guard.budget, guard.splits) == (2048, 1)
    with pytest.raises(OutOfMemoryForOneSequence, match=r"one sequence each \(the longest 300"):
        guard.split(can_split=False, longest=300)


def _split_step(rank: int, world: int, group: dist.ProcessGroup, ckpt: str) -> None:
    # rank 1 alone says its 2nd micro-batch will not fit: rank 0 must split with it
    faults.configure("train_oom:train:@2:1", rank)
    split = Trainer(tiny_model(), group, config(micro_batch_tokens=16))
    half = Trainer(tiny_model(), group, config(micro_batch_tokens=8))
    batch = make_batch(3, n=8)
    lengths = [len(p) + len(r) for p, r in zip(batch.prompt_ids, batch.response_ids)]
    assert any(len(mb) > 1 for plan in plan_micro_batches(lengths, world, 16) for mb in plan)
    first = split.train_step(batch)
    assert (first.oom_splits, first.micro_batch_tokens, split.guard.budget) == (1, 8, 8)
    want = half.train_step(batch)
    assert (want.oom_splits, want.micro_batch_tokens) == (0, 8)
    # the split step ran from nothing: the same micro-batches, the same sums, the same weights
    assert first.loss == want.loss and first.grad_norm == want.grad_norm
    assert first.micro_batches == want.micro_batches
    assert_same(split.full_state_dict(), half.full_state_dict())
    second = split.train_step(make_batch(4, n=8))
    assert second.oom_splits == 0 and second.micro_batch_tokens == 8  # kept for the run
    assert second.loss == half.train_step(make_batch(4, n=8)).loss
    split.save(ckpt)
    restarted = Trainer(tiny_model(), group, config(micro_batch_tokens=16))
    restarted.load(ckpt)
    assert restarted.guard.budget == 8  # kept across a restart too
    faults.configure("", rank)


@pytest.mark.slow
def test_a_micro_batch_that_does_not_fit_splits_the_step_on_every_rank(tmp_path: Path) -> None:
    spawn(_split_step, 2, str(tmp_path / "ckpt"))


def _one_sequence_each(rank: int, world: int, group: dist.ProcessGroup) -> None:
    faults.configure("train_oom:train:@1:0", rank)
    trainer = Trainer(tiny_model(), group, config(micro_batch_tokens=1))
    with pytest.raises(OutOfMemoryForOneSequence, match="--train.devices"):
        trainer.train_step(make_batch(5, n=4))  # both ranks raise: they agreed
    faults.configure("", rank)


@pytest.mark.slow
def test_a_split_that_cannot_help_stops_every_rank_with_one_line() -> None:
    spawn(_one_sequence_each, 2)
