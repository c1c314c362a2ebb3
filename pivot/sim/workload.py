"""The simulated workload, stated in one place: the paper's setup (§8.1, Appendix E) where it
says, DAPO's recipe where it does not.

- Data: DAPO-Math-17k prompts (the paper's training set). Its problems with DAPO's answer-format
  instruction are short: median 150 tokens, capped at the paper's 2K.
- Group size 16: DAPO samples 16 responses per prompt (GRPO groups), as the presets do.
- Prompts per step: the paper does not state its batch. DAPO's recipe takes 512 prompts per step
  on 128 GPUs, i.e. 4 per device; the default keeps that ratio (1.5B and 7B groups on 32 GPUs:
  128 prompts x 16 = 2,048 samples; 32B on 64: 256; 72B on 128: DAPO's 512). A step is then
  minutes of cluster work, as in the paper's Figure 10 (its 1,728 s PivotRL trace of the 7B
  group marks three training phases), so the cluster, not the single longest sequence, sets
  most of the step time. A batch of 32 prompts is tail-bound instead: each step waits for its
  longest rollout + judge chain, which no deployment can shorten (`critical_path_s` in
  pivot/sim/report.py).
- Policy responses: log-normal, median 1,500 tokens, sigma 1.0 (mean ~2,500), clipped at the
  paper's 15K cap: the long tail (about 1% of responses reach the cap) is what idles static pools.
  DAPO reports mean lengths growing from ~1K to ~4-5K over training; this is the early-middle.
- GenRM responses: the judge reasons before it scores (GLM-Z1 and Qwen3 are thinking models):
  median 2,500 tokens, sigma 0.8 (mean ~3,400), clipped at the paper's 20K cap (~0.5% reach it).
  Its prompt is a 200-token judge template plus the question plus the policy's response.
- Shared prefixes, which a serving engine prefills once per replica (sglang's radix cache, the
  embedded engine's keyed blocks): a group's 16 rollouts share their whole prompt, and every
  rollout prompt opens with DAPO's answer-format instruction (about 40 tokens with the chat
  template's header). Every judge prompt opens with the template's instructions (150 of its 200
  tokens), followed by the question, so a group's judges share those and the question too.
- Staleness 2 (the paper's setting for every asynchronous deployment) is `cfg.train.staleness`;
  colocated runs on-policy.

Every length of step s is drawn from `random.Random(f"{seed}/{step}")`, so a step's samples do
not depend on the deployment or on event order.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

DAPO_PROMPTS_PER_DEVICE = 4
"""DAPO's 512 prompts per step on 128 GPUs."""


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
        return int(
            min(
                self.cap,
                max(self.low, round(rng.lognormvariate(math.log(self.median), self.sigma))),
            )
        )


@dataclass(frozen=True)
class Workload:
    prompt: LengthDist = field(default_factory=lambda: LengthDist(150, 0.4, 2048))
    response: LengthDist = field(default_factory=lambda: LengthDist(1500, 1.0, 15360))
    judge: LengthDist = field(default_factory=lambda: LengthDist(2500, 0.8, 20480))
    judge_template_tokens: int = 200
    prompt_common_tokens: int = 40
    """Leading tokens every rollout prompt shares (a group's prompts are identical)."""
    judge_common_tokens: int = 150
    """Leading tokens of the judge template every judge prompt shares."""
    judge_question_first: bool = True
    """The question follows those tokens (before the response): a group's judges share it too."""
    prompts_per_step: int | None = None
    """Prompts of one RL step; None = `DAPO_PROMPTS_PER_DEVICE` per device of the cluster."""
    group_size: int = 16
    """Responses per prompt."""

    def __post_init__(self) -> None:
        if self.prompts_per_step is not None and self.prompts_per_step < 1:
            raise ValueError(
                f"Workload.prompts_per_step={self.prompts_per_step}: need >= 1 (or None)"
            )
        if self.group_size < 1:
            raise ValueError(f"Workload.group_size={self.group_size}: need >= 1")
        if not 0 <= self.judge_common_tokens <= self.judge_template_tokens:
            raise ValueError(
                f"Workload.judge_common_tokens={self.judge_common_tokens}: need 0..judge_template_tokens"
            )
        if self.prompt_common_tokens < 0:
            raise ValueError(
                f"Workload.prompt_common_tokens={self.prompt_common_tokens}: need >= 0"
            )

    def rollout_prefixes(self, s: SimSample) -> tuple[tuple[object, int], ...]:
        """(key, tokens) of the prefixes `s`'s rollout prompt shares with others, shortest first."""
        common = min(self.prompt_common_tokens, s.prompt_len)
        return (("rollout",), common), (("rollout", s.step, s.group), s.prompt_len)

    def judge_prefixes(self, s: SimSample) -> tuple[tuple[object, int], ...]:
        """(key, tokens) of the prefixes `s`'s judge prompt shares with others, shortest first."""
        out: tuple[tuple[object, int], ...] = ((("reward",), self.judge_common_tokens),)
        if self.judge_question_first:
            out += ((("reward", s.step, s.group), self.judge_common_tokens + s.prompt_len),)
        return out

    def prompts(self, devices: int) -> int:
        return (
            self.prompts_per_step
            if self.prompts_per_step is not None
            else DAPO_PROMPTS_PER_DEVICE * devices
        )

    def describe(self, devices: int) -> str:
        def d(x: LengthDist) -> str:
            return f"lognormal(median {x.median:g}, sigma {x.sigma:g}) <= {x.cap}"

        return (
            f"{self.prompts(devices)} prompts x {self.group_size} per step; prompt {d(self.prompt)}, "
            f"response {d(self.response)}, judge {d(self.judge)}"
        )


@dataclass(frozen=True)
class SimSample:
    """One response of one prompt of one step, with every length it will have."""

    step: int
    index: int
    group: int
    """The prompt it answers (its GRPO group) within the step."""
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


def step_samples(w: Workload, seed: int, step: int, devices: int) -> list[SimSample]:
    """The prompts x group_size samples of `step` on a cluster of `devices` (a group shares its prompt)."""
    rng = random.Random(f"{seed}/{step}")
    out: list[SimSample] = []
    for group in range(w.prompts(devices)):
        p = w.prompt.draw(rng)
        for _ in range(w.group_size):
            r, j = w.response.draw(rng), w.judge.draw(rng)
            out.append(SimSample(step, len(out), group, p, r, j, w.judge_template_tokens + p + r))
    return out
