"""The simulated workload: long-tail length distributions and the samples of each RL step.

Lengths are log-normal (median, sigma) clipped to [low, cap]: most responses are short, a few
run to the cap, which is the long tail that idles static deployments. Caps follow the paper:
prompt 2K, policy response 15K, GenRM response 20K tokens. A GenRM sequence's prompt is the
judge template plus the question plus the policy's response (the judge reads the response).
Every length of step s is drawn from `random.Random(f"{seed}/{step}")`, so a step's samples do
not depend on the deployment or on event order.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field


@dataclass(frozen=True)
class LengthDist:
    median: float
    sigma: float
    cap: int
    low: int = 16

    def __post_init__(self) -> None:
        if not (self.median > 0 and self.sigma >= 0 and 0 < self.low <= self.cap):
            raise ValueError(f"LengthDist: need median > 0, sigma >= 0, 0 < low <= cap, got {self}")

    def draw(self, rng: random.Random) -> int:
        return int(min(self.cap, max(self.low, round(rng.lognormvariate(math.log(self.median), self.sigma)))))


@dataclass(frozen=True)
class Workload:
    prompt: LengthDist = field(default_factory=lambda: LengthDist(300, 0.5, 2048))
    response: LengthDist = field(default_factory=lambda: LengthDist(1500, 1.0, 15360))
    judge: LengthDist = field(default_factory=lambda: LengthDist(1200, 1.0, 20480))
    judge_template_tokens: int = 200


@dataclass(frozen=True)
class Sample:
    """One response of one prompt of one step, with every length it will have."""

    step: int
    index: int
    prompt_len: int
    response_len: int
    judge_len: int
    judge_prompt_len: int

    @property
    def tokens(self) -> int:
        """Tokens the run processes for this sample: rollout prompt + response, judge prompt + response."""
        return self.prompt_len + self.response_len + self.judge_prompt_len + self.judge_len

    @property
    def train_tokens(self) -> int:
        return self.prompt_len + self.response_len


def step_samples(w: Workload, seed: int, step: int, batch_prompts: int, group_size: int) -> list[Sample]:
    """The B x G samples of `step` (a group shares its prompt)."""
    rng = random.Random(f"{seed}/{step}")
    out: list[Sample] = []
    for _ in range(batch_prompts):
        p = w.prompt.draw(rng)
        for _ in range(group_size):
            r, j = w.response.draw(rng), w.judge.draw(rng)
            out.append(Sample(step, len(out), p, r, j, w.judge_template_tokens + p + r))
    return out
