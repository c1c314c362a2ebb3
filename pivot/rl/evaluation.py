"""Held-out evaluation: a fixed prompt set never trained on, and the greedy accuracy of the
policy on it (verifiable reward only, so the GenRM's errors do not enter the figure).

Where the held-out set comes from (`pivot.config.EvalConfig`): `--eval.path` when given; for
a task that draws fresh problems (the built-in synthetic one: `pivot.tiny.task.heldout_split`),
new problems whose prompt is not in the training set; for a user's `--data.path`, `eval.prompts`
rows (at most a tenth of the file) taken out of the training data by a seeded draw, so the
cursor never serves them. The evaluation runs on the
rollout replicas like any other rollout (veRL validates on its rollout engine too); the run
records the policy versions that generated it, because a replica can lag the trainer.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field

from pivot.config import DataConfig, EvalConfig
from pivot.rl.data import Prompt, PromptDataset, load_dataset


def split_heldout(
    data: DataConfig,
    config: EvalConfig,
    train: PromptDataset,
    seed: int,
    fresh: Callable[[int, set[str]], list[Prompt]] | None = None,
) -> tuple[PromptDataset, list[Prompt]]:
    """(training set, held-out prompts); the training set loses the held-out rows when they come
    from it. Off (`eval.every == 0`): the training set unchanged and no held-out prompts.
    `fresh(n, seen)`: n new problems whose text is not in `seen`, from a task that can draw them."""
    if config.every == 0:
        return train, []
    if config.path:
        return train, load_dataset(
            DataConfig(path=config.path, prompt_key=data.prompt_key, answer_key=data.answer_key)
        ).prompts[: config.prompts]
    if fresh is not None:
        return train, fresh(config.prompts, {p.text for p in train.prompts})
    n = min(config.prompts, len(train) // 10)
    if n == 0:
        return train, []
    order = list(range(len(train)))
    random.Random(seed * 7_919 + 1).shuffle(order)
    held = set(order[:n])
    kept = [p for i, p in enumerate(train.prompts) if i not in held]
    return PromptDataset(kept, train.stats, train.source), [train.prompts[i] for i in sorted(held)]


@dataclass
class EvalResult:
    """One evaluation: greedy accuracy of the policy after `step` training steps."""

    step: int
    accuracy: float
    prompts: int
    response_len: float
    versions: tuple[int, int]
    """Oldest and newest policy version that generated the responses (equal unless a replica lagged)."""
    seconds: float
    scores: list[float] = field(default_factory=list)
    """Each held-out prompt's score, in prompt order: two evaluations of one run compare prompt by
    prompt (`paired_gain`), which resolves a gain several times smaller than their accuracies' noise."""


@dataclass
class EvalRun:
    step: int
    total: int
    started: float
    tokens: int = 0
    versions: list[int] = field(default_factory=list)
    scores: dict[int, float] = field(default_factory=dict)
    """Score of each held-out prompt evaluated so far, by prompt index."""

    def add(self, prompt: int, score: float, response_tokens: int, version: int) -> None:
        self.scores[prompt] = score
        self.tokens += response_tokens
        self.versions.append(version)

    @property
    def finished(self) -> bool:
        return len(self.scores) >= self.total

    def result(self, now: float) -> EvalResult:
        done = len(self.scores)
        n = max(done, 1)
        return EvalResult(
            self.step,
            sum(self.scores.values()) / n,
            done,
            self.tokens / n,
            (min(self.versions, default=-1), max(self.versions, default=-1)),
            now - self.started,
            [self.scores[i] for i in sorted(self.scores)],
        )


def paired_gain(before: list[float], after: list[float]) -> tuple[float, float]:
    """(mean gain, its standard error) between two evaluations of the same prompts: the standard
    error of the mean per-prompt difference, so prompts both evaluations got right (or wrong)
    add no noise."""
    if len(before) != len(after) or len(before) < 2:
        raise ValueError(
            f"paired_gain needs two score lists of one length >= 2, got {len(before)} and {len(after)}"
        )
    diffs = [b - a for a, b in zip(before, after)]
    return statistics.fmean(diffs), statistics.stdev(diffs) / len(diffs) ** 0.5


LEARNED_SE = 4.0
"""A held-out gain counts as learned when it exceeds this many paired standard errors."""


def learned(
    before: list[float], after: list[float], min_gain: float = 0.0
) -> tuple[float, float, bool]:
    """(gain, standard error, whether the gain is at least `min_gain` and more than `LEARNED_SE`
    paired standard errors): the one rule the run summary and tools/bench_learning.py apply."""
    gain, se = paired_gain(before, after)
    return gain, se, gain >= min_gain and gain > LEARNED_SE * se


def eval_due(step: int, total_steps: int, every: int) -> bool:
    """Evaluate after `step` training steps: before the first, every `every`, and after the last."""
    return every > 0 and (step % every == 0 or step == total_steps)
