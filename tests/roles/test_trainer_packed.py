"""The packed trainer (pivot/rl/logprobs.py) against the padded one it replaced
(tests/rl/padded_reference.py, patched in), on 2 gloo ranks under FSDP2 in fp32: every loss
option gives the same loss, gradient norm, statistics and mismatch metrics to 1e-6 two steps
running, and the same gradients, on batches of uneven rows (a long tail beside short answers)."""

from __future__ import annotations

import random
from pathlib import Path
from unittest import mock

import pytest
import torch
import torch.distributed as dist
from test_trainer import VOCAB, config
from trainer_harness import spawn, tiny_model

from pivot.model import CausalLM, save_pretrained
from pivot.model.meta_init import params_on_meta
from pivot.rl.batch import TrainBatch
from pivot.roles.trainer import Trainer
from tests.rl.padded_reference import padded_logprobs, padded_plan

pytestmark = pytest.mark.slow

OPTIONS: dict[str, dict[str, object]] = {
    "ppo-token": {},
    "sequence-dual-clip": {"loss_agg": "sequence", "dual_clip_c": 3.0},
    "kl-reference": {"kl_coef": 0.3, "kl_estimator": "kl"},
    "tis-token-mis-sequence": {
        "rollout_is": "token",
        "rollout_rs": "sequence",
        "rollout_rs_threshold": 1.5,
    },  # fmt: skip
    "tis-sequence": {"rollout_is": "sequence"},
}


def uneven_batch(seed: int, n: int = 8) -> TrainBatch:
    rng = random.Random(seed)
    prompts = [[rng.randrange(VOCAB) for _ in range(rng.randint(2, 6))] for _ in range(n)]
    responses = [[rng.randrange(VOCAB) for _ in range(rng.choice([1, 2, 4, 30]))] for _ in range(n)]
    behaviour = [[-rng.uniform(2.5, 4.5) for _ in r] for r in responses]
    # half the rows made by two policy versions (an in-flight update at their 2nd token)
    starts = [
        [(0, 0), (1, 1)] if i % 2 and len(r) > 1 else [(0, 0)] for i, r in enumerate(responses)
    ]
    advantages = [rng.uniform(-1.5, 1.5) for _ in range(n)]
    return TrainBatch(prompts, responses, advantages, behaviour, version_starts=starts)


def run(group: dist.ProcessGroup, folder: str, options: dict[str, object]) -> tuple[list, list]:
    """Two steps' metrics, and the gradients of the first (AdamW's exp_avg after it is
    (1 - beta1) x the clipped gradient; weights would compare AdamW's normalisation, which
    turns rounding noise on a near-zero gradient into a step of up to lr)."""
    trainer = Trainer(tiny_model(), group, config(micro_batch_tokens=40, **options))
    if options.get("kl_coef"):
        with torch.device("cpu"), params_on_meta():
            reference = CausalLM(tiny_model().args)
        trainer.attach_reference(reference, folder)
    metrics = [trainer.train_step(uneven_batch(0))]
    beta1 = trainer.config.beta1
    grads = [s["exp_avg"].to_local() / (1 - beta1) for s in trainer.optimizer.state.values()]
    metrics.append(trainer.train_step(uneven_batch(1)))
    return metrics, grads


def _packed_equals_padded(rank: int, world: int, group: dist.ProcessGroup, folder: str) -> None:
    for name, options in OPTIONS.items():
        packed, grads = run(group, folder, options)
        with (
            mock.patch("pivot.roles.trainer.response_logprobs", padded_logprobs),
            mock.patch("pivot.roles.trainer.plan_micro_batches", padded_plan),
        ):
            padded, grads0 = run(group, folder, options)
        for a, b in zip(packed, padded):
            assert not a.skipped and a.tokens == b.tokens, name
            for field in ("loss", "grad_norm", "clip_frac", "approx_kl", "kl_ref"):
                assert getattr(a, field) == pytest.approx(getattr(b, field), abs=1e-6), (
                    name,
                    field,
                )
            assert a.mismatch.keys() == b.mismatch.keys()
            for key in a.mismatch:
                assert a.mismatch[key] == pytest.approx(b.mismatch[key], abs=1e-6), (name, key)
        assert packed[1].micro_batches <= padded[1].micro_batches, name  # no padding to fit
        assert len(grads) == len(grads0)
        for g, g0 in zip(grads, grads0):
            assert (g - g0).abs().max() < 1e-6, (name, (g - g0).abs().max().item())


def test_packed_and_padded_trainers_agree_with_every_loss_option(tmp_path: Path) -> None:
    save_pretrained(tiny_model(), tmp_path / "policy")
    spawn(_packed_equals_padded, 2, str(tmp_path / "policy"))
