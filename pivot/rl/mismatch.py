"""The rollout/trainer mismatch: how far the log-probs the rollout engine reported are from the
trainer's on the same tokens, measured every step from what the trainer already computed (no
extra forward), and its correction by truncated or masked importance sampling.

Per response token t, with r_t = logp_trainer - logp_rollout:
    |dlogp| = |r_t|
    k3      = exp(r_t) - r_t - 1    (>= 0; over tokens the rollout sampled, an unbiased estimate
                                     of KL(pi_rollout || pi_trainer))
    sequence log-ratio = sum_t r_t  (what a sequence-level weight exponentiates)
Split by the policy version that made each token: "current" tokens were made, as was every token
before them in their response, by the version the trainer holds, so their gap is the engine's
numerics alone (kernels, dtype, batching); "stale" ones adds the policy's drift since (an older
version, or K/V an older version computed before an in-flight update). A sequence counts as
current when all its tokens are.

Correction, with veRL's names (`algorithm.rollout_correction`) and ms-swift's four modes:
    rollout_is = token | sequence       truncated IS: each token's policy-gradient term is
                                        weighted by min(rho, rollout_is_threshold), detached;
                                        rho = exp(r_t) (token) or exp(sum_t r_t) (sequence)
    rollout_rs = token | sequence       masked IS (rejection): a token (or a whole sequence) whose
                                        rho lies outside [lower, upper] adds nothing to the loss
Ratios are bounded to exp(+-20) first, as veRL does. With either on, the PPO ratio's anchor is the
trainer's own log-probs (veRL's decoupled mode: one update per batch, so that ratio is 1 in the
forward and the clip never binds) and the rollout -> trainer gap is carried by the weight alone;
with both off the anchor is the rollout's log-probs (veRL's bypass mode), as before. A rejected
token still counts in the loss's normaliser, as a token of weight zero: the normaliser is the
whole batch's, fixed before its micro-batches run on every rank.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

LEVELS = ("token", "sequence")
SAFETY = 20.0
"""|log rho| bound before exponentiating (veRL's [exp(-20), exp(20)])."""

# the additive sums one micro-batch contributes; per split (current, stale)
_SUMS = ("tokens", "abs", "k3", "seqs", "seq_abs", "seq_log")
SUMS = len(_SUMS) * 2 + 2
"""Length of `mismatch_sums`' vector: the two splits, then the tokens truncated and rejected."""


def _masks(mask: torch.Tensor, current: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    m = mask.bool()
    return m & current, m & ~current


def zero_sums(device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """What `mismatch_sums` returns for no tokens: where a step's sums start."""
    return torch.zeros(SUMS, dtype=torch.float64, device=device), torch.zeros(
        2, dtype=torch.float64, device=device
    )


def mismatch_sums(
    logprobs: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    mask: torch.Tensor,
    current: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Additive float64 sums over [B, T] tokens (current: bool [B, T], made by the trainer's
    version) and the largest |dlogp| of each split, to be reduced across micro-batches and ranks
    (sum, max) before `mismatch_metrics`. The last two sums are left to `correction_weights`."""
    r = (logprobs.detach().double() - rollout_logprobs.detach().double()) * mask
    k3 = torch.expm1(r.clamp(-SAFETY, SAFETY)) - r
    sums, peaks = [], []
    seq_log = r.sum(dim=1)
    has = mask.bool().any(dim=1)
    for part in _masks(mask, current):
        whole = has & (part.sum(dim=1) == mask.bool().sum(dim=1))  # every token in this split
        sums += [
            part.sum(),
            (r.abs() * part).sum(),
            (k3 * part).sum(),
            whole.sum(),
            (seq_log.abs() * whole).sum(),
            (seq_log * whole).sum(),
        ]
        peaks.append((r.abs() * part).max() if part.any() else r.new_zeros(()))
    sums += [r.new_zeros(()), r.new_zeros(())]
    return torch.stack([s.double() for s in sums]), torch.stack(peaks)


def mismatch_metrics(sums: torch.Tensor, peaks: torch.Tensor) -> dict[str, float]:
    """The step's figures from the reduced sums: per split, mean and max |dlogp|, mean k3, mean
    |sequence log-ratio| and its signed mean, and the split's share of tokens; the correction's
    truncated and rejected shares of all tokens."""
    out: dict[str, float] = {}
    total = float(sums[0] + sums[len(_SUMS)])
    for k, split in enumerate(("current", "stale")):
        s = dict(zip(_SUMS, (float(x) for x in sums[k * len(_SUMS) : (k + 1) * len(_SUMS)])))
        n, seqs = max(s["tokens"], 1.0), max(s["seqs"], 1.0)
        out |= {
            f"mismatch_{split}/abs_mean": s["abs"] / n,
            f"mismatch_{split}/abs_max": float(peaks[k]),
            f"mismatch_{split}/k3": s["k3"] / n,
            f"mismatch_{split}/seq_abs_log_ratio": s["seq_abs"] / seqs,
            f"mismatch_{split}/seq_log_ratio": s["seq_log"] / seqs,
            f"mismatch_{split}/token_share": s["tokens"] / max(total, 1.0),
        }
    out["rollout_is/truncated_share"] = float(sums[-2]) / max(total, 1.0)
    out["rollout_rs/rejected_share"] = float(sums[-1]) / max(total, 1.0)
    return out


def _rho(log_ratio: torch.Tensor, mask: torch.Tensor, level: str) -> torch.Tensor:
    """rho per token [B, T]: its own (token) or its sequence's (sequence), safety-bounded."""
    if level == "token":
        return torch.exp(log_ratio.clamp(-SAFETY, SAFETY))
    if level == "sequence":
        seq = (log_ratio * mask).sum(dim=1, keepdim=True).clamp(-SAFETY, SAFETY)
        return torch.exp(seq).expand_as(log_ratio)
    raise ValueError(f"rollout correction level {level!r} is not one of {LEVELS}")


@dataclass(frozen=True, kw_only=True)
class Correction:
    """The rollout correction's settings, veRL's names (see the module docstring)."""

    rollout_is: str | None = None
    """Truncated IS at this level (one of LEVELS); None: off."""
    is_threshold: float = 2.0
    """The truncated weights' upper bound (`rollout_is_threshold`)."""
    rollout_rs: str | None = None
    """Masked IS (rejection) at this level; None: off."""
    rs_upper: float = 2.0
    rs_lower: float = 0.5
    """rho outside [rs_lower, rs_upper] is rejected (`rs_bounds` gives veRL's defaults)."""

    @property
    def active(self) -> bool:
        """Either correction is on: the PPO ratio is then anchored at the trainer's own
        log-probs (decoupled mode), the rollout -> trainer gap carried by the weights."""
        return self.rollout_is is not None or self.rollout_rs is not None


def correction_weights(
    logprobs: torch.Tensor,
    rollout_logprobs: torch.Tensor,
    mask: torch.Tensor,
    correction: Correction,
    sums: torch.Tensor | None = None,
) -> torch.Tensor | None:
    """Detached per-token weights [B, T] of the policy-gradient term (see the module docstring),
    or None with both off. `sums` (from `mismatch_sums`) gets the tokens truncated and rejected."""
    if not correction.active:
        return None
    m = mask.to(logprobs.dtype)
    log_ratio = (logprobs.detach() - rollout_logprobs.detach().to(logprobs.dtype)) * m
    weights = m.clone()
    if correction.rollout_is is not None:
        rho = _rho(log_ratio, m, correction.rollout_is)
        truncated = (rho > correction.is_threshold) & mask.bool()
        weights = weights * rho.clamp(max=correction.is_threshold)
        if sums is not None:
            sums[-2] += truncated.sum().double()
    if correction.rollout_rs is not None:
        rho = _rho(log_ratio, m, correction.rollout_rs)
        rejected = ((rho > correction.rs_upper) | (rho < correction.rs_lower)) & mask.bool()
        weights = weights * (~rejected).to(weights.dtype)
        if sums is not None:
            sums[-1] += rejected.sum().double()
    return weights


def rs_bounds(
    threshold: float | None, lower: float | None, is_threshold: float
) -> tuple[float, float]:
    """veRL's defaults: the upper bound is `rollout_is_threshold` when not given, the lower bound
    its reciprocal."""
    upper = is_threshold if threshold is None else threshold
    return upper, (1.0 / upper if lower is None else lower)
