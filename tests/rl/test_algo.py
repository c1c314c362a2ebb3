"""RL math against hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from pivot.rl.algo import LossOptions, LossTokens, aggregate, grpo_advantages, kl_k3, ppo_clip_loss


def test_grpo_advantages_hand_values() -> None:
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0], [2.0, 2.0, 2.0, 2.0]])
    # group 0: mean 0.5, unbiased std sqrt(1/3)
    std = math.sqrt(((0.5**2) * 4) / 3)
    adv = grpo_advantages(r, eps=0.0)
    expect0 = torch.tensor([0.5, -0.5, -0.5, 0.5]) / std
    assert torch.allclose(adv[0], expect0)
    assert torch.equal(adv[1], torch.zeros(4))
    assert torch.allclose(
        grpo_advantages(r, normalize_std=False)[0], torch.tensor([0.5, -0.5, -0.5, 0.5])
    )


def test_grpo_single_sample_group_is_zero() -> None:
    assert torch.equal(grpo_advantages(torch.tensor([[3.0], [1.0]])), torch.zeros(2, 1))
    with pytest.raises(ValueError, match="rewards must be"):
        grpo_advantages(torch.zeros(4))


def test_ppo_clip_hand_values() -> None:
    # token ratios: exp(log 1.5)=1.5 (clipped at 1.28 for A>0), exp(log 0.5)=0.5 (A<0 clipped at 0.8), 1.0
    logp = torch.log(torch.tensor([[1.5, 0.5, 1.0]]))
    old = torch.zeros(1, 3)
    mask = torch.ones(1, 3)
    # per-token advantages
    adv = torch.tensor([[1.0, -1.0, 2.0]])
    tokens = LossTokens(logprobs=logp, behaviour_logprobs=old, advantages=adv, mask=mask)
    loss, st = ppo_clip_loss(tokens, LossOptions(clip_eps_low=0.2, clip_eps_high=0.28))
    # token 0: max(-1.5, -1.28) = -1.28; token 1: max(0.5, 0.8) = 0.8; token 2: -2
    assert loss.item() == pytest.approx((-1.28 + 0.8 - 2.0) / 3, abs=1e-6)
    assert st.clip_frac == pytest.approx(2 / 3)
    assert st.tokens == 3


def test_dual_clip_bounds_negative_advantage() -> None:
    logp = torch.log(torch.tensor([[5.0, 5.0]]))
    old = torch.zeros(1, 2)
    adv = torch.tensor([[-1.0, 1.0]])
    tokens = LossTokens(
        logprobs=logp, behaviour_logprobs=old, advantages=adv, mask=torch.ones(1, 2)
    )
    loss, st = ppo_clip_loss(tokens, LossOptions(dual_clip_c=3.0))
    # token 0: pg = max(5, 1.28) = 5 -> min(5, 3) = 3; token 1: max(-5, -1.28) = -1.28 (no dual clip for A>0)
    assert loss.item() == pytest.approx((3.0 - 1.28) / 2, abs=1e-6)
    assert st.dual_clip_frac == pytest.approx(0.5)
    with pytest.raises(ValueError, match="dual_clip_c"):
        ppo_clip_loss(tokens, LossOptions(dual_clip_c=0.5))


def test_aggregation_token_vs_sequence() -> None:
    v = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    m = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert aggregate(v, m, "token").item() == pytest.approx((1 + 2 + 3 + 4) / 4)
    assert aggregate(v, m, "sequence").item() == pytest.approx((2.0 + 4.0) / 2)
    # an explicit normalizer lets micro-batches sum to the whole batch's loss
    parts = aggregate(v[:1], m[:1], "token", normalizer=4) + aggregate(
        v[1:], m[1:], "token", normalizer=4
    )
    assert parts.item() == pytest.approx(aggregate(v, m, "token").item())
    parts = aggregate(v[:1], m[:1], "sequence", normalizer=2) + aggregate(
        v[1:], m[1:], "sequence", normalizer=2
    )
    assert parts.item() == pytest.approx(aggregate(v, m, "sequence").item())
    with pytest.raises(ValueError, match="aggregation"):
        aggregate(v, m, "mean")


def test_sequence_advantages_broadcast_and_mask() -> None:
    logp = torch.zeros(2, 2)
    mask = torch.tensor([[1, 1], [1, 0]])
    adv = torch.tensor([1.0, -3.0])
    loss, _ = ppo_clip_loss(
        LossTokens(logprobs=logp, behaviour_logprobs=logp, advantages=adv, mask=mask)
    )
    # ratio 1 everywhere: token losses -1, -1, 3 (masked token ignored)
    assert loss.item() == pytest.approx((-1 - 1 + 3) / 3)


def test_kl_term_and_gradient() -> None:
    logp = torch.tensor([[math.log(0.5)]], requires_grad=True)
    ref = torch.tensor([[math.log(0.25)]])
    k3 = kl_k3(logp.detach(), ref)
    # exp(ref - logp) - (ref - logp) - 1 = 0.5 - log(0.5) - 1
    assert k3.item() == pytest.approx(0.5 - math.log(0.5) - 1)
    tokens = LossTokens(
        logprobs=logp,
        behaviour_logprobs=logp.detach(),
        advantages=torch.tensor([0.0]),
        mask=torch.ones(1, 1),
        ref_logprobs=ref,
    )
    loss, st = ppo_clip_loss(tokens, LossOptions(kl_coef=0.1))
    assert loss.item() == pytest.approx(0.1 * k3.item())
    assert st.kl_ref == pytest.approx(k3.item())
    loss.backward()
    # d/dlogp of 0.1 * (exp(ref - logp) - (ref - logp) - 1) = 0.1 * (1 - exp(ref - logp)) = 0.05
    assert logp.grad.item() == pytest.approx(0.05)
    with pytest.raises(ValueError, match="ref_logprobs"):
        no_ref = LossTokens(
            logprobs=logp,
            behaviour_logprobs=logp,
            advantages=torch.tensor([1.0]),
            mask=torch.ones(1, 1),
        )
        ppo_clip_loss(no_ref, LossOptions(kl_coef=0.1))


def test_policy_gradient_sign() -> None:
    logp = torch.zeros(1, 1, requires_grad=True)
    tokens = LossTokens(
        logprobs=logp,
        behaviour_logprobs=torch.zeros(1, 1),
        advantages=torch.tensor([2.0]),
        mask=torch.ones(1, 1),
    )
    loss, _ = ppo_clip_loss(tokens)
    loss.backward()
    # ratio = 1 inside the clip range: d(-A * exp(logp - old))/dlogp = -A
    assert logp.grad.item() == pytest.approx(-2.0)


def test_sequence_aggregation_skips_fully_masked_rows() -> None:
    v = torch.tensor([[1.0, 2.0, 3.0], [5.0, 5.0, 5.0], [4.0, 0.0, 0.0]])
    m = torch.tensor([[1, 1, 1], [0, 0, 0], [1, 0, 0]])
    # rows with tokens: means 2 and 4; the empty row neither adds nor counts
    assert aggregate(v, m, "sequence").item() == pytest.approx(3.0)
    assert aggregate(v, m, "token").item() == pytest.approx((1 + 2 + 3 + 4) / 4)
    # micro-batches passing the whole batch's count of rows with tokens sum to the whole loss
    for split in (1, 2):
        parts = aggregate(v[:split], m[:split], "sequence", normalizer=2) + aggregate(
            v[split:], m[split:], "sequence", normalizer=2
        )
        assert parts.item() == pytest.approx(3.0)
    assert aggregate(v[1:2], m[1:2], "sequence").item() == 0.0  # nothing to average: zero, not NaN
    zeros, adv = torch.zeros(3, 3), torch.tensor([1.0, 7.0, -3.0])
    tokens = LossTokens(logprobs=zeros, behaviour_logprobs=zeros, advantages=adv, mask=m)
    loss, st = ppo_clip_loss(tokens, LossOptions(agg="sequence"))
    assert loss.item() == pytest.approx((-1.0 + 3.0) / 2) and st.tokens == 4


def test_kl_k3_clamped_like_verl_low_var_kl() -> None:
    x = torch.tensor(
        [-1e4, -50.0, -20.0, -11.0, -5.0, 0.0, 2.0, 2.5, 3.0, 20.0, 50.0, 1e4]
    )  # ref - logp
    logp = torch.zeros_like(x, requires_grad=True)
    k3 = kl_k3(logp, x)
    want = [
        min(math.exp(max(-20.0, min(20.0, v))) - max(-20.0, min(20.0, v)) - 1.0, 10.0)
        for v in x.tolist()
    ]
    assert k3.tolist() == pytest.approx(want, rel=1e-6)
    assert k3.tolist()[5] == 0.0 and max(k3.tolist()) == 10.0
    k3.sum().backward()
    # d k3 / d logp = 1 - exp(ref - logp) inside the clamp, 0 where the value is clamped at 10
    grad = [0.0 if w >= 10.0 else 1.0 - math.exp(v) for v, w in zip(x.tolist(), want)]
    assert logp.grad.tolist() == pytest.approx(grad, rel=1e-6, abs=1e-6)
    assert torch.isfinite(logp.grad).all()
