"""RL math as pure tensor functions: GRPO group advantages and the PPO-clip policy loss.

Conventions: token tensors are [B, T] with a 0/1 (or bool) `mask` marking response tokens;
per-sequence advantages are [B] and broadcast over tokens. Log-probs are natural-log.

Loss per token (ratio r = exp(logp - logp_behaviour), advantage A):
    pg   = max(-A * r, -A * clip(r, 1 - eps_low, 1 + eps_high))        PPO clip (DAPO clip-higher)
    pg   = min(pg, -A * c)   where A < 0, when dual_clip_c = c > 1       dual clip
    loss = pg + kl_coef * kl(ref, logp)                                  optional KL to a reference
with veRL's `kl_loss_type` estimators: "low_var_kl" (k3) = exp(ref - logp) - (ref - logp) - 1
(non-negative, unbiased estimator of KL(pi || ref)), clamped as veRL does: ref - logp to
[-20, 20] and k3 to at most KL_CLAMP = 10; "kl" (k1) = logp - ref.

Aggregation: "token" (DAPO default) = sum over all masked tokens / number of masked tokens;
"sequence" = mean over sequences of each sequence's token mean, counting only sequences that
have at least one masked token (an empty response has no mean to contribute). Both accept an
explicit `normalizer` so a batch split into micro-batches (or across ranks) sums exactly to the
loss of the whole batch: pass the whole batch's token count ("token") or its count of sequences
with tokens ("sequence").
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

AGGREGATIONS = ("token", "sequence")
KL_ESTIMATORS = ("low_var_kl", "kl")
"""veRL's names (`actor.kl_loss_type`): k3 and k1."""
KL_CLAMP = 10.0
"""Upper bound of the per-token k3 value (veRL's `low_var_kl`)."""


def grpo_advantages(
    rewards: torch.Tensor, normalize_std: bool = True, eps: float = 1e-6
) -> torch.Tensor:
    """[B, G] rewards -> [B, G] float32 advantages: reward minus its group mean, divided by the
    group's (unbiased) std + eps when `normalize_std`. A group of one sample, or one whose rewards
    are all equal (max == min, so it does not hang on how the mean rounds), gets exactly zero
    advantage (no learning signal). Computed in float64 so a large common offset (rewards around
    1e6) does not swamp the differences within a group."""
    if rewards.dim() != 2:
        raise ValueError(f"rewards must be [B, G], got shape {tuple(rewards.shape)}")
    r = rewards.double()
    if r.shape[1] < 2:
        return torch.zeros(r.shape, dtype=torch.float32)
    constant = r.amax(dim=1, keepdim=True) == r.amin(dim=1, keepdim=True)
    centered = r - r.mean(dim=1, keepdim=True)
    if normalize_std:
        centered = centered / (r.std(dim=1, keepdim=True) + eps)
    return torch.where(constant, torch.zeros_like(centered), centered).float()


@dataclass
class LossStats:
    """Diagnostics of one loss evaluation (detached floats, averaged over masked tokens)."""

    clip_frac: float
    dual_clip_frac: float
    approx_kl_behaviour: float
    kl_ref: float
    tokens: int


def aggregate(
    values: torch.Tensor, mask: torch.Tensor, agg: str = "token", normalizer: float | None = None
) -> torch.Tensor:
    """Reduce [B, T] per-token values to a scalar (see the module docstring). A row with no
    masked token (an empty response) adds nothing under either aggregation and, for "sequence",
    is not counted in the default normalizer (the rows that have tokens), so it cannot dilute
    the others; an explicit `normalizer` must count the same way (`TrainBatch.rows_with_tokens`)."""
    if agg not in AGGREGATIONS:
        raise ValueError(f"loss aggregation {agg!r} is not one of {AGGREGATIONS}")
    mask = mask.to(values.dtype)
    if agg == "token":
        denom = mask.sum() if normalizer is None else normalizer
        return (values * mask).sum() / max(float(denom), 1.0)
    tokens = mask.sum(dim=1)
    per_seq = (values * mask).sum(dim=1) / tokens.clamp(min=1.0)
    denom = (tokens > 0).sum() if normalizer is None else normalizer
    return per_seq.sum() / max(float(denom), 1.0)


def kl_k3(logprobs: torch.Tensor, ref_logprobs: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(pi || ref), clamped as veRL's `low_var_kl`: the log-ratio to
    [-20, 20] (keeps exp finite) and the estimate to at most 10 (k3 >= 0, so the lower bound of
    -10 never binds). Beyond the clamp the gradient is zero: one token far from the reference
    cannot dominate the loss."""
    log_ratio = (ref_logprobs - logprobs).clamp(-20.0, 20.0)
    return (torch.exp(log_ratio) - log_ratio - 1.0).clamp(max=KL_CLAMP)


def kl_estimate(logprobs: torch.Tensor, ref_logprobs: torch.Tensor, estimator: str) -> torch.Tensor:
    """Per-token KL(pi || ref) by `estimator` (one of KL_ESTIMATORS)."""
    if estimator == "low_var_kl":
        return kl_k3(logprobs, ref_logprobs)
    if estimator == "kl":
        return logprobs - ref_logprobs
    raise ValueError(f"kl estimator {estimator!r} is not one of {KL_ESTIMATORS}")


@dataclass(frozen=True, kw_only=True)
class LossOptions:
    """The PPO-clip loss's settings (see the module docstring); `TrainConfig` holds the same names."""

    clip_eps_low: float = 0.2
    clip_eps_high: float = 0.28
    dual_clip_c: float | None = None
    """c > 1 bounds a negative advantage's term at -A * c; None: no dual clip."""
    agg: str = "token"
    """One of AGGREGATIONS."""
    kl_coef: float = 0.0
    kl_estimator: str = "low_var_kl"
    """One of KL_ESTIMATORS."""


DEFAULT_OPTIONS = LossOptions()


@dataclass(frozen=True, kw_only=True)
class LossTokens:
    """One micro-batch's tokens as the loss sees them: token tensors [B, T], `mask` marking the
    response tokens, advantages [B] or [B, T]."""

    logprobs: torch.Tensor
    """The policy's, differentiable: what the loss is taken with respect to."""
    behaviour_logprobs: torch.Tensor
    """The anchor of PPO's ratio: the rollout's log-probs, or the trainer's own, detached."""
    advantages: torch.Tensor
    mask: torch.Tensor
    ref_logprobs: torch.Tensor | None = None
    """The KL loss's reference; needed when `LossOptions.kl_coef` > 0."""
    token_weights: torch.Tensor | None = None
    """Scale each token's policy-gradient term, not its KL term (detached): the rollout
    correction's importance weights (pivot/rl/mismatch.py)."""


def ppo_clip_loss(
    tokens: LossTokens, options: LossOptions = DEFAULT_OPTIONS, normalizer: float | None = None
) -> tuple[torch.Tensor, LossStats]:
    """PPO-clip loss against the behaviour log-probs; see the module docstring. `normalizer`:
    the whole batch's count (`aggregate`), so micro-batches sum to the batch's loss.
    Returns the scalar loss (differentiable w.r.t. `tokens.logprobs`) and detached statistics."""
    logprobs, mask, c = tokens.logprobs, tokens.mask, options.dual_clip_c
    if logprobs.shape != tokens.behaviour_logprobs.shape or logprobs.shape != mask.shape:
        raise ValueError(
            f"shape mismatch: logprobs {tuple(logprobs.shape)}, behaviour_logprobs "
            f"{tuple(tokens.behaviour_logprobs.shape)}, mask {tuple(mask.shape)}"
        )
    if c is not None and c <= 1.0:
        raise ValueError(f"dual_clip_c must be > 1, got {c}")
    if options.kl_coef and tokens.ref_logprobs is None:
        raise ValueError("kl_coef > 0 needs ref_logprobs")
    adv = tokens.advantages[:, None] if tokens.advantages.dim() == 1 else tokens.advantages
    adv = adv.to(logprobs.dtype).expand_as(logprobs)
    log_ratio = (logprobs - tokens.behaviour_logprobs.to(logprobs.dtype)).clamp(-20.0, 20.0)
    ratio = torch.exp(log_ratio)
    pg_unclipped = -adv * ratio
    pg_clipped = -adv * ratio.clamp(1.0 - options.clip_eps_low, 1.0 + options.clip_eps_high)
    pg = torch.maximum(pg_unclipped, pg_clipped)
    dual = torch.zeros_like(pg, dtype=torch.bool)
    if c is not None:
        bound = -adv * c
        dual = (adv < 0) & (pg > bound)
        pg = torch.where(adv < 0, torch.minimum(pg, bound), pg)
    weights = tokens.token_weights
    loss_tok = pg if weights is None else pg * weights.detach().to(pg.dtype)
    kl_ref = torch.zeros_like(pg)
    if tokens.ref_logprobs is not None:
        ref = tokens.ref_logprobs.to(logprobs.dtype)
        kl_ref = kl_estimate(logprobs, ref, options.kl_estimator)
        loss_tok = loss_tok + options.kl_coef * kl_ref
    loss = aggregate(loss_tok, mask, options.agg, normalizer)
    with torch.no_grad():
        m = mask.bool()
        n = int(m.sum())
        denom = max(n, 1)
        stats = LossStats(
            clip_frac=float(((pg_clipped > pg_unclipped) & m).sum()) / denom,
            dual_clip_frac=float((dual & m).sum()) / denom,
            approx_kl_behaviour=float((0.5 * log_ratio.pow(2) * m).sum()) / denom,
            kl_ref=float((kl_ref * m).sum()) / denom,
            tokens=n,
        )
    return loss, stats
