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

Agentic episodes (`Workload.agentic`, default None: every sample one answer, as above). With an
`Agentic` record each rollout sample is an episode of policy turns with a tool call between two
turns: the tool runs on the CPU host for its latency, its response is appended to the context
(prefilled, not generated) and the policy continues. Its numbers and their sources are in
`Agentic`'s docstring. An episode's turns, tool responses and latencies are drawn from
`random.Random(f"{seed}/{step}/{index}/episode")` (per sample), after the step's own draws, which
stay as they are: an agentic step has the same prompts and judge lengths as the single-answer step
of the same seed, and the single-answer `response` draw is replaced by the episode's turns. The
GenRM judges the whole trajectory (template + question + every turn and tool response) and the
trainer trains on the whole context (tool tokens are masked out of the loss but still pass
through forward and backward).
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
class SecondsDist:
    """A log-normal duration in seconds, clipped to [low, cap] (a tool call's latency: `cap` is
    the tool's timeout)."""

    median: float
    sigma: float
    cap: float
    low: float = 0.0

    def __post_init__(self) -> None:
        if not (self.median > 0 and self.sigma >= 0 and 0 <= self.low <= self.cap):
            raise ValueError(
                f"SecondsDist: need median > 0, sigma >= 0, 0 <= low <= cap, got {self}"
            )

    def draw(self, rng: random.Random) -> float:
        return min(self.cap, max(self.low, rng.lognormvariate(math.log(self.median), self.sigma)))


@dataclass(frozen=True)
class Agentic:
    """Multi-turn rollouts with tools: each sample an episode of `turns` policy turns of
    `turn_tokens` generated tokens each, and after every turn but the last a tool call that runs
    `tool_latency` seconds on the CPU host (no device work) and appends `tool_tokens` tokens to the
    context. The default is one moderate regime, a code-interpreter / search agent (a few calls,
    sub-second to a few seconds each), from public agentic-RL setups:

    - turns: log-normal median 3 (2 tool calls), sigma 0.5, 1..8. Search-R1
      (arXiv 2503.09516; github.com/PeterGriffinJin/Search-R1 `train_ppo.sh`) trains with a budget
      of 2-4 turns (RL2's Search-R1 example: `rollout.max_turns=4`); a re-examination
      (jinyansu1.github.io, "Search-R1, Re-examined", 2026) finds PPO grows into the 3-search
      budget and GRPO plateaus at 1-2 searches. veRL's ReTool recipe (code interpreter,
      `recipe/retool/run_qwen2_7b_dapo.sh`) allows up to 16 turns; ToRL (arXiv 2503.23383) caps
      the calls per response with a hyperparameter C because tool time idles the GPUs. The cap 8
      is an assumption between the two. SWE-agent style episodes (SkyRL-Agent, arXiv 2511.16108:
      up to 100 steps; DeepSWE, together.ai/blog/deepswe, 50 steps) are far longer: a regime to
      state with its own `Agentic`, not this default.
    - tokens per policy turn: log-normal median 450, sigma 1.0, 16..8,192. Search-R1 generates at
      most 500 tokens a turn (`max_response_length=500`); ReTool's recipe allows 16,384 response
      tokens over its 16 turns, and its paper reports responses of ~6K-10K tokens over the
      episode. The median is chosen so an episode generates about what one answer of the
      single-answer workload does (mean ~2,500 tokens over ~3.4 turns against ~2,400; medians
      ~1,950 and 1,500), so the two workloads compare on equal generation; sigma and cap are
      assumptions.
    - tokens per tool response: log-normal median 200, sigma 0.8, 16..1,024. Search-R1 caps an
      observation at 500 tokens (`max_obs_length=500`, top-3 passages); code-interpreter outputs
      are short (ToRL keeps only the last line of an error); veRL caps a response at
      `max_tool_response_length` characters. The median is an assumption.
    - tool latency: log-normal median 1.0 s, sigma 1.0 (10% under 0.28 s, 10% over 3.6 s), capped
      at 30 s. A retrieval call is ~0.1-0.4 s (a production retrieval stack's P50 120 ms / P95
      400 ms, pursuitagent.com "retrieval latency budget"), ~1.5 s with a cross-encoder reranker
      (contextual.ai, "Making search agents faster and smarter"); a sandboxed Python call is
      sub-second to seconds, with timeouts of 20 s (rLLM's E2B tool) and 30 s (veRL's ReTool
      sandbox config, `default_timeout: 30`), the cap here. The median and sigma are
      assumptions within those reports (no source gives a latency distribution).
    """

    turns: LengthDist = field(default_factory=lambda: LengthDist(3, 0.5, 8, low=1))
    turn_tokens: LengthDist = field(default_factory=lambda: LengthDist(450, 1.0, 8192))
    tool_tokens: LengthDist = field(default_factory=lambda: LengthDist(200, 0.8, 1024))
    tool_latency: SecondsDist = field(default_factory=lambda: SecondsDist(1.0, 1.0, 30.0))

    def draw(self, seed: int, step: int, index: int) -> Episode:
        """Sample `index` of `step`'s episode: its own generator, so the step's other draws and
        the other samples' episodes do not depend on it."""
        rng = random.Random(f"{seed}/{step}/{index}/episode")
        n = self.turns.draw(rng)
        turns = tuple(self.turn_tokens.draw(rng) for _ in range(n))
        tools = tuple(self.tool_tokens.draw(rng) for _ in range(n - 1))
        latency = tuple(self.tool_latency.draw(rng) for _ in range(n - 1))
        return Episode(turns, tools, latency)

    def describe(self) -> str:
        def d(x: LengthDist) -> str:
            return f"lognormal(median {x.median:g}, sigma {x.sigma:g}) {x.low}..{x.cap}"

        t = self.tool_latency
        return (
            f"agentic: turns {d(self.turns)}, tokens per turn {d(self.turn_tokens)}, tool response "
            f"{d(self.tool_tokens)}, tool latency lognormal(median {t.median:g} s, sigma "
            f"{t.sigma:g}) <= {t.cap:g} s"
        )


@dataclass(frozen=True)
class Episode:
    """One agentic sample's episode: the tokens each policy turn generates, and between two turns
    the tokens each tool response appends and the seconds each tool call runs."""

    turns: tuple[int, ...]
    tools: tuple[int, ...]
    tool_s: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.turns or not len(self.tools) == len(self.tool_s) == len(self.turns) - 1:
            raise ValueError(
                f"Episode: need >= 1 turn and one tool call between two turns, got {self}"
            )

    def context_before(self, turn: int) -> int:
        """Tokens after the prompt when policy turn `turn` (0-based) starts."""
        return sum(self.turns[:turn]) + sum(self.tools[:turn])


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
    agentic: Agentic | None = None
    """Multi-turn rollouts with tools (`Agentic`); None: one answer per sample."""

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

        response = f"response {d(self.response)}, " if self.agentic is None else ""
        return (
            f"{self.prompts(devices)} prompts x {self.group_size} per step; prompt {d(self.prompt)}, "
            f"{response}judge {d(self.judge)}"
            + (f"; {self.agentic.describe()}" if self.agentic is not None else "")
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
    """Tokens the policy generates (an episode's: over all its turns)."""
    judge_len: int
    judge_prompt_len: int
    episode: Episode | None = None
    """Its turns and tool calls (`Workload.agentic`); None: one answer."""

    @property
    def tool_tokens(self) -> int:
        """Tokens the tools' responses append to the context (prefilled, not generated)."""
        return sum(self.episode.tools) if self.episode is not None else 0

    @property
    def tokens(self) -> int:
        """Tokens the run processes for this sample: rollout prompt + response (and the tools'
        responses), judge prompt + response."""
        return self.train_tokens + self.judge_prompt_len + self.judge_len

    @property
    def train_tokens(self) -> int:
        """The whole trajectory: tool tokens are out of the loss but in forward and backward."""
        return self.prompt_len + self.response_len + self.tool_tokens


def step_samples(w: Workload, seed: int, step: int, devices: int) -> list[SimSample]:
    """The prompts x group_size samples of `step` on a cluster of `devices` (a group shares its prompt)."""
    rng = random.Random(f"{seed}/{step}")
    out: list[SimSample] = []
    for group in range(w.prompts(devices)):
        p = w.prompt.draw(rng)
        for _ in range(w.group_size):
            r, j = w.response.draw(rng), w.judge.draw(rng)
            if w.agentic is None:
                out.append(
                    SimSample(step, len(out), group, p, r, j, w.judge_template_tokens + p + r)
                )
                continue
            ep = w.agentic.draw(seed, step, len(out))
            r = sum(ep.turns)
            judge_prompt = w.judge_template_tokens + p + r + sum(ep.tools)
            out.append(SimSample(step, len(out), group, p, r, j, judge_prompt, ep))
    return out
