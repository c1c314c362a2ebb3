"""The rollout/trainer mismatch figures and the rollout correction's weights, against values
worked out by hand from the definitions (veRL's rollout correction; pivot/rl/mismatch.py)."""

from __future__ import annotations

import math

import pytest
import torch

from pivot.rl.algo import LossTokens, ppo_clip_loss
from pivot.rl.mismatch import (
    Correction,
    correction_weights,
    mismatch_metrics,
    mismatch_sums,
    rs_bounds,
    zero_sums,
)

# two responses: row 0 has 3 tokens (the last two made by the current version), row 1 has 2 (old)
TRAINER = torch.tensor([[-1.0, -2.0, -0.5], [-0.2, -3.0, 0.0]])
ROLLOUT = torch.tensor([[-1.5, -2.0, -0.1], [-0.2, -1.0, 0.0]])
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
CURRENT = torch.tensor([[False, True, True], [False, False, True]])


def k3(r: float) -> float:
    return math.exp(r) - r - 1


def test_figures_split_by_the_version_that_made_each_token() -> None:
    sums, peaks = mismatch_sums(TRAINER, ROLLOUT, MASK, CURRENT)
    m = mismatch_metrics(sums, peaks)
    # r = trainer - rollout: row 0 (0.5, 0.0, -0.4), row 1 (0.0, -2.0); current: 0.0, -0.4
    assert m["mismatch_current/abs_mean"] == pytest.approx(0.2)
    assert m["mismatch_current/abs_max"] == pytest.approx(0.4)
    assert m["mismatch_current/k3"] == pytest.approx((k3(0.0) + k3(-0.4)) / 2)
    assert m["mismatch_current/token_share"] == pytest.approx(2 / 5)
    # stale tokens: 0.5 (row 0), 0.0 and -2.0 (row 1)
    assert m["mismatch_stale/abs_mean"] == pytest.approx(2.5 / 3)
    assert m["mismatch_stale/abs_max"] == pytest.approx(2.0)
    assert m["mismatch_stale/k3"] == pytest.approx((k3(0.5) + k3(0.0) + k3(-2.0)) / 3)
    # a sequence is current only when every token is: row 0 is mixed (in neither), row 1 stale
    assert m["mismatch_current/seq_abs_log_ratio"] == 0.0
    assert m["mismatch_stale/seq_log_ratio"] == pytest.approx(-2.0)
    assert m["mismatch_stale/seq_abs_log_ratio"] == pytest.approx(2.0)


def test_sums_from_micro_batches_add_up_to_the_whole_batch() -> None:
    whole = mismatch_metrics(*mismatch_sums(TRAINER, ROLLOUT, MASK, CURRENT))
    sums, peaks = zero_sums("cpu")
    for row in range(2):
        s, p = mismatch_sums(
            TRAINER[row : row + 1],
            ROLLOUT[row : row + 1],
            MASK[row : row + 1],
            CURRENT[row : row + 1],
        )
        sums, peaks = sums + s, torch.maximum(peaks, p)
    assert mismatch_metrics(sums, peaks) == pytest.approx(whole)


def test_identical_log_probs_give_zero_everywhere() -> None:
    m = mismatch_metrics(*mismatch_sums(TRAINER, TRAINER, MASK, CURRENT))
    assert all(v == 0.0 for k, v in m.items() if not k.endswith("token_share"))


def test_truncated_token_and_sequence_weights() -> None:
    sums, _ = zero_sums("cpu")
    w = correction_weights(
        TRAINER, ROLLOUT, MASK, Correction(rollout_is="token", is_threshold=1.5), sums
    )
    want = torch.tensor([[1.5, 1.0, math.exp(-0.4)], [1.0, math.exp(-2.0), 0.0]])
    torch.testing.assert_close(w, want)  # exp(0.5) = 1.65 truncated to 1.5; padding weighs 0
    assert int(sums[-2]) == 1
    w = correction_weights(
        TRAINER, ROLLOUT, MASK, Correction(rollout_is="sequence", is_threshold=2.0)
    )
    seq = [math.exp(0.5 + 0.0 - 0.4), math.exp(-2.0)]
    torch.testing.assert_close(w, torch.tensor([[seq[0]] * 3, [seq[1]] * 2 + [0.0]]))


def test_masked_token_and_sequence_weights_reject_outside_the_bounds() -> None:
    upper, lower = rs_bounds(None, None, 1.5)
    assert (upper, lower) == (1.5, pytest.approx(1 / 1.5))
    sums, _ = zero_sums("cpu")
    token = Correction(rollout_rs="token", rs_upper=upper, rs_lower=lower)
    w = correction_weights(TRAINER, ROLLOUT, MASK, token, sums)
    # rho: 1.65 (out), 1, 0.67 (in: above 1/1.5), 1, 0.135 (out)
    torch.testing.assert_close(w, torch.tensor([[0.0, 1.0, 1.0], [1.0, 0.0, 0.0]]))
    assert int(sums[-1]) == 2
    sequence = Correction(rollout_rs="sequence", rs_upper=upper, rs_lower=lower)
    w = correction_weights(TRAINER, ROLLOUT, MASK, sequence)
    torch.testing.assert_close(w, torch.tensor([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0]]))


def test_both_off_is_no_weight_at_all() -> None:
    assert correction_weights(TRAINER, ROLLOUT, MASK, Correction()) is None


def test_weights_scale_each_tokens_policy_gradient() -> None:
    """Decoupled mode: anchored at the trainer's own log-probs the ratio is 1, so the gradient of
    each token's term is -A * w / N (veRL's truncated IS policy gradient)."""
    lp = TRAINER.clone().requires_grad_(True)
    w = correction_weights(TRAINER, ROLLOUT, MASK, Correction(rollout_is="token", is_threshold=1.5))
    adv = torch.tensor([1.0, -2.0])
    tokens = LossTokens(
        logprobs=lp, behaviour_logprobs=lp.detach(), advantages=adv, mask=MASK, token_weights=w
    )
    loss, _ = ppo_clip_loss(tokens)
    loss.backward()
    want = -adv[:, None] * w * MASK / MASK.sum()
    torch.testing.assert_close(lp.grad, want)
