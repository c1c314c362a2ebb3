"""The training batch: token ids, GRPO advantages and behaviour log-probs, one row per sample."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from pivot.rl.algo import grpo_advantages
from pivot.rl.buffer import Sample


@dataclass
class TrainBatch:
    prompt_ids: list[list[int]]
    response_ids: list[list[int]]
    advantages: list[float]
    """One advantage per sequence (GRPO: group-normalised reward)."""
    behaviour_logprobs: list[list[float]] | None = None
    """Rollout log-prob of each response token; None = on-policy (the trainer's own, detached)."""
    ref_logprobs: list[list[float]] | None = None
    """Reference-model log-probs, needed when kl_coef > 0."""
    version_starts: list[list[tuple[int, int]]] | None = None
    """Per row, (policy version, index of the first response token it made), as the engine
    reports them (`Output.version_starts`); [] or None: not known. The trainer splits the
    rollout/trainer mismatch by it (pivot/rl/mismatch.py)."""
    response_mask: list[list[int]] | None = None
    """Per row, 1 for each response token the policy made, 0 for a tool's response or the chat
    template's text around it (multi-turn episodes); None: every response token is the policy's.
    Only the 1s enter the loss, its normalizer, the mismatch figures and the correction."""

    def __post_init__(self) -> None:
        n = len(self.prompt_ids)
        for name in (
            "response_ids",
            "advantages",
            "behaviour_logprobs",
            "ref_logprobs",
            "version_starts",
            "response_mask",
        ):
            value = getattr(self, name)
            if value is not None and len(value) != n:
                raise ValueError(f"TrainBatch.{name} has {len(value)} rows, prompt_ids has {n}")
        for i, (p, r) in enumerate(zip(self.prompt_ids, self.response_ids)):
            if not p:
                raise ValueError(f"TrainBatch row {i}: empty prompt")
            for name in ("behaviour_logprobs", "ref_logprobs", "response_mask"):
                rows = getattr(self, name)
                if rows is not None and len(rows[i]) != len(r):
                    raise ValueError(
                        f"TrainBatch.{name} row {i}: {len(rows[i])} values for {len(r)} response tokens"
                    )

    def loss_mask(self, row: int) -> list[int]:
        """Row `row`'s response tokens that enter the loss (1) or not (0)."""
        if self.response_mask is None:
            return [1] * len(self.response_ids[row])
        return self.response_mask[row]

    def __len__(self) -> int:
        return len(self.prompt_ids)

    @property
    def response_tokens(self) -> int:
        """Response tokens the loss counts: the policy's own (tools' responses are not)."""
        if self.response_mask is None:
            return sum(len(r) for r in self.response_ids)
        return sum(sum(m) for m in self.response_mask)

    @property
    def rows_with_tokens(self) -> int:
        """Rows with a token the loss counts: the "sequence" loss normalizer (`algo.aggregate`)."""
        if self.response_mask is None:
            return sum(1 for r in self.response_ids if r)
        return sum(1 for m in self.response_mask if any(m))


def batch_from_groups(
    groups: list[list[Sample]],
    tokenize: Callable[[str], list[int]] | None = None,
    normalize_std: bool = True,
) -> TrainBatch:
    """Rewarded groups, one per prompt (`SampleBuffer.take_batch`), -> a TrainBatch with GRPO
    advantages, rows in group order.

    Groups may differ in size (a caller that dropped a failed response): each group's advantages
    use its own size, so a group of one gets 0. `SampleBuffer.take_batch` itself always yields
    equal groups (a step is only ready when every one of its B x G samples has a reward)."""
    flat = [s for g in groups for s in g]
    prompts: list[list[int]] = []
    for s in flat:
        if s.reward is None:
            raise ValueError(f"sample {s.key} has no reward")
        if s.prompt_ids is None and tokenize is None:
            raise ValueError(f"sample {s.key} has no prompt_ids and no tokenizer was given")
        prompts.append(s.prompt_ids if s.prompt_ids is not None else tokenize(s.prompt.text))  # type: ignore[misc]
    has_lp = all(s.logprobs is not None for s in flat)
    masked = any(s.response_mask is not None for s in flat)
    return TrainBatch(
        prompt_ids=prompts,
        response_ids=[list(s.response_ids or []) for s in flat],
        advantages=_advantages(groups, normalize_std),
        behaviour_logprobs=[list(s.logprobs) for s in flat] if has_lp else None,  # type: ignore[arg-type]
        version_starts=[[tuple(v) for v in s.version_starts or ()] for s in flat],  # type: ignore[misc]
        response_mask=[
            list(s.response_mask)
            if s.response_mask is not None
            else [1] * len(s.response_ids or ())
            for s in flat
        ]
        if masked
        else None,
    )


def _advantages(groups: list[list[Sample]], normalize_std: bool) -> list[float]:
    """GRPO advantages of every sample in group order; groups of one size share one tensor call."""
    by_size: dict[int, list[int]] = {}
    for i, g in enumerate(groups):
        by_size.setdefault(len(g), []).append(i)
    per_group: list[list[float]] = [[] for _ in groups]
    for rows in by_size.values():
        rewards = torch.tensor(
            [[float(s.reward or 0.0) for s in groups[i]] for i in rows], dtype=torch.float64
        )  # a finished group's samples all have rewards
        for i, adv in zip(rows, grpo_advantages(rewards, normalize_std=normalize_std).tolist()):
            per_group[i] = adv
    return [a for adv in per_group for a in adv]
