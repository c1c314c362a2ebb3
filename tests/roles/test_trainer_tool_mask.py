"""A multi-turn episode's tool tokens (mask 0) never enter the loss, its normalizer, the mismatch
figures or the rollout correction: whatever log-probs the batch gives them, one FSDP2 step
(1 gloo rank) ends with the same loss, statistics and weights; without the mask the same change
moves them (the check can fail)."""

from __future__ import annotations

import random

import pytest
import torch
import torch.distributed as dist
from test_trainer import VOCAB, config
from trainer_harness import spawn, tiny_model

from pivot.rl.batch import TrainBatch
from pivot.roles.trainer import Trainer

pytestmark = pytest.mark.slow

TOOL = slice(3, 9)  # each row's tool response sits between its two policy turns


def episode_batch(tool_logprob: float, masked: bool = True, n: int = 4) -> TrainBatch:
    rng = random.Random(0)
    prompts = [[rng.randrange(VOCAB) for _ in range(3)] for _ in range(n)]
    responses = [[rng.randrange(VOCAB) for _ in range(12)] for _ in range(n)]
    behaviour = []
    for _ in range(n):
        row = [-rng.uniform(2.5, 4.5) for _ in range(12)]
        row[TOOL] = [tool_logprob] * (TOOL.stop - TOOL.start)
        behaviour.append(row)
    mask = [[0 if TOOL.start <= i < TOOL.stop else 1 for i in range(12)] for _ in range(n)]
    return TrainBatch(
        prompts,
        responses,
        [1.0, -1.0, 0.5, -0.5],
        behaviour,
        version_starts=[[(0, 0)]] * n,
        response_mask=mask if masked else None,
    )


def _one_step(group: dist.ProcessGroup, batch: TrainBatch, options: dict) -> tuple:
    """The step's figures (loss, gradient norm, clipping, KL, tokens, mismatch) and weights."""
    trainer = Trainer(tiny_model(), group, config(micro_batch_tokens=64, **options))
    m = trainer.train_step(batch)
    weights = {k: v.clone() for k, v in trainer.full_state_dict().items()}
    return (m.loss, m.grad_norm, m.clip_frac, m.approx_kl, m.tokens, m.mismatch), weights


def _tool_tokens_change_nothing(rank: int, world: int, group: dist.ProcessGroup) -> None:
    for options in (
        {},
        {"loss_agg": "sequence"},
        {"rollout_is": "token", "rollout_rs": "token", "rollout_rs_threshold": 2.0},
    ):
        (a, wa), (b, wb) = (_one_step(group, episode_batch(lp), options) for lp in (-0.05, -9.0))
        assert a == b, options
        assert all(torch.equal(wa[k], wb[k]) for k in wa), options
        (c, _), (d, _) = (
            _one_step(group, episode_batch(lp, masked=False), options) for lp in (-0.05, -9.0)
        )
        assert c != d, options  # unmasked, the same change would count
    assert episode_batch(-1.0).response_tokens == 4 * 6  # the token normalizer: policy tokens


def test_tool_tokens_never_enter_the_loss() -> None:
    spawn(_tool_tokens_change_nothing, 1)
