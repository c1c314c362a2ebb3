"""A training step in the trainer's records: the loss every micro-batch of the step shares
(`StepLoss`), one micro-batch of this rank's rows (`MicroBatch`), and what the micro-batches add
up to before the step reduces it over the ranks (`StepSums`)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from pivot.config import TrainConfig
from pivot.rl.algo import LossOptions, LossStats
from pivot.rl.batch import TrainBatch
from pivot.rl.mismatch import Correction, rs_bounds, zero_sums


@dataclass(frozen=True, kw_only=True)
class StepLoss:
    """What every micro-batch of one step computes its loss with."""

    options: LossOptions
    correction: Correction
    normalizer: float
    """The whole batch's token count ("token") or count of rows with tokens ("sequence"), so
    the micro-batches' losses, on every rank, sum to the batch's."""
    reference_forward: bool
    """The KL loss's reference log-probs are computed here, per micro-batch (the batch brings
    none)."""

    @classmethod
    def of(cls, cfg: TrainConfig, batch: TrainBatch) -> StepLoss:
        upper, lower = rs_bounds(
            cfg.rollout_rs_threshold, cfg.rollout_rs_threshold_lower, cfg.rollout_is_threshold
        )
        return cls(
            options=LossOptions(
                clip_eps_low=cfg.clip_eps_low,
                clip_eps_high=cfg.clip_eps_high,
                dual_clip_c=cfg.dual_clip_c or None,
                agg=cfg.loss_agg,
                kl_coef=cfg.kl_coef,
                kl_estimator=cfg.kl_estimator,
            ),
            correction=Correction(
                rollout_is=cfg.rollout_is,
                is_threshold=cfg.rollout_is_threshold,
                rollout_rs=cfg.rollout_rs,
                rs_upper=upper,
                rs_lower=lower,
            ),
            normalizer=float(
                batch.response_tokens if cfg.loss_agg == "token" else batch.rows_with_tokens
            ),
            reference_forward=bool(cfg.kl_coef) and batch.ref_logprobs is None,
        )


@dataclass(frozen=True, kw_only=True)
class MicroBatch:
    """Rows of the step's batch that one rank trains in one forward and backward."""

    rows: list[int]
    """Indices into the batch; empty: the rank has no rows left, and joins the collectives."""
    prompts: list[list[int]]
    responses: list[list[int]]
    tokens: int
    """Prompt and response tokens, packed (no padding computed)."""


def micro_batches(
    batch: TrainBatch, mine: list[list[int]], count: int, lengths: list[int]
) -> Iterator[MicroBatch]:
    """This rank's `count` micro-batches from its plan `mine` (the longest rank's plan has
    `count`; the ones past the end of `mine` are empty) and each row's length."""
    for m in range(count):
        rows = mine[m] if m < len(mine) else []
        yield MicroBatch(
            rows=rows,
            prompts=[batch.prompt_ids[i] for i in rows],
            responses=[batch.response_ids[i] for i in rows],
            tokens=sum(lengths[i] for i in rows),
        )


@dataclass
class StepSums:
    """What this rank's micro-batches add up to, on the trainer's device (an NCCL-only group has
    no backend for CPU tensors)."""

    device: torch.device
    count: int
    """Micro-batches every rank runs."""
    totals: torch.Tensor = field(init=False)
    """float64 [5]: loss, tokens, and clipped, approx_kl and kl_ref weighted by tokens."""
    gap: torch.Tensor = field(init=False)
    """`pivot.rl.mismatch`'s sums: the rollout/trainer gap, then the correction's counts."""
    peaks: torch.Tensor = field(init=False)
    """The largest |dlogp| of each split."""

    def __post_init__(self) -> None:
        self.gap, self.peaks = zero_sums(self.device)
        self.totals = torch.zeros(5, dtype=torch.float64, device=self.device)

    def add_mismatch(self, part: torch.Tensor, part_peaks: torch.Tensor) -> None:
        self.gap, self.peaks = self.gap + part, torch.maximum(self.peaks, part_peaks)

    def add_loss(self, loss: torch.Tensor, stats: LossStats) -> None:
        t = stats.tokens
        self.totals += torch.tensor(
            [loss.item(), t, stats.clip_frac * t, stats.approx_kl_behaviour * t, stats.kl_ref * t],
            dtype=torch.float64,
            device=self.device,
        )
