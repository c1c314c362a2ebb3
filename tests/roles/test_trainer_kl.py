"""The KL loss against the initial policy (`--train.kl-coef`), as veRL's `use_kl_loss`: the
reference is the policy folder's weights, FSDP-sharded beside the policy and frozen, its log-probs
computed per micro-batch on the training ranks. Held against a plain single-process forward of the
folder's model, and veRL's estimator formulas (tests/rl/test_verl_compat.py)."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from test_trainer import config, make_batch
from trainer_harness import spawn, tiny_model

from pivot.model import CausalLM, from_pretrained, save_pretrained
from pivot.model.meta_init import params_on_meta
from pivot.rl.algo import kl_estimate
from pivot.roles.trainer import Trainer

pytestmark = pytest.mark.slow


def response_lp(model: CausalLM, prompt: list[int], response: list[int]) -> torch.Tensor:
    logits = model(torch.tensor([prompt + response])).log_softmax(-1)[0]
    return torch.stack([logits[len(prompt) - 1 + j, t] for j, t in enumerate(response)])


def _kl(rank: int, world: int, group: dist.ProcessGroup, folder: str, estimator: str) -> None:
    initial = from_pretrained(folder)  # the oracle's reference: a plain forward of the folder
    trainer = Trainer(tiny_model(), group, config(kl_coef=0.5, kl_estimator=estimator, lr=5e-2))
    with torch.device("cpu"), params_on_meta():  # as the training role builds it
        reference = CausalLM(initial.args)
    trainer.attach_reference(reference, folder)
    first = trainer.train_step(make_batch(0))
    assert first.kl_ref == pytest.approx(0.0, abs=1e-7)  # the policy still is the reference
    trainer.train_step(make_batch(1))
    # the reference leaves with the trainer on shift down and comes back byte for byte
    before = [p.to_local().clone() for p in trainer.reference.parameters()]
    trainer.shift_down()
    assert all(p.to_local().untyped_storage().nbytes() == 0 for p in trainer.reference.parameters())
    trainer.shift_up()
    assert all(torch.equal(a, p.to_local()) for a, p in zip(before, trainer.reference.parameters()))
    policy = copy.deepcopy(initial)
    policy.load_state_dict(trainer.full_state_dict(), strict=False)
    batch = make_batch(2)
    with torch.no_grad():
        want = torch.cat([
            kl_estimate(response_lp(policy, p, r), response_lp(initial, p, r), estimator)
            for p, r in zip(batch.prompt_ids, batch.response_ids)
        ]).mean()  # fmt: skip
    got = trainer.train_step(batch)
    assert abs(want.item()) > 1e-4  # two steps moved the policy away from the reference
    assert got.kl_ref == pytest.approx(want.item(), rel=1e-4, abs=1e-7)


@pytest.mark.parametrize("estimator", ["low_var_kl", "kl"])
def test_kl_loss_against_the_initial_policy(tmp_path: Path, estimator: str) -> None:
    save_pretrained(tiny_model(), tmp_path / "policy")
    spawn(_kl, 2, str(tmp_path / "policy"), estimator)
