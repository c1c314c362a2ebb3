"""The `tools` section: multi-turn rollouts whose policy calls tools (pivot/runtime/flow/episodes.py).

Off unless `--tools.config` names a tool config in veRL's layout (configs/tools/calculator.yaml is
one). An episode is a sequence of turns: the policy generates until its end-of-turn token; the
tool calls in that turn run (off the engine's thread, `pivot.tools.runner`), their responses are
appended as the policy's chat template renders tool messages, and the policy continues. The
episode ends at a turn without a tool call, after `max_turns` turns, or when its tokens reach
`max_episode_tokens`; whatever the limit, the sample is what the episode made so far.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pivot.bad_input import check as _check


@dataclass
class ToolsConfig:
    config: str = ""
    """Tool config file in veRL's layout (`tools:` entries with `class_name`, `config`,
    `tool_schema`). Empty: no tools, one turn per rollout."""
    format: Literal["hermes", "glm4"] = "hermes"
    """How the policy writes a tool call: hermes (Qwen2.5, Qwen3: `<tool_call>{json}</tool_call>`)
    or glm4 (GLM-4.5/4.6's `<arg_key>`/`<arg_value>` form)."""
    max_turns: int = 4
    """Most policy turns per episode; the last turn's tool calls, if any, are not run."""
    max_episode_tokens: int = 1024
    """Most tokens after the prompt (the policy's turns and the tools' responses); a turn may
    generate at most what is left, and at most rollout.max_new_tokens."""
    timeout_s: float = 30.0
    """A tool call running longer answers `Error: tool NAME timed out` (the episode goes on)."""
    max_in_flight: int = 64
    """Tool calls running at once, over all episodes (the others wait their turn)."""
    max_response_chars: int = 2000
    """A tool response longer than this is cut, with a marker (veRL's max_tool_response_length)."""
    judge_sees: Literal["trajectory", "answer"] = "trajectory"
    """What the GenRM judges: the whole transcript (the policy's turns, its calls and the tools'
    responses) or the last turn's text only."""
    reward_weight: float = 0.0
    """Weight of the tools' own reward (the sum of each tool's `calc_reward` at the episode's end
    and the step rewards its calls returned) added to the sample's reward."""

    @property
    def enabled(self) -> bool:
        return bool(self.config)

    def __post_init__(self) -> None:
        _check(self.max_turns >= 1, "tools.max_turns", self.max_turns, "must be >= 1")
        _check(
            self.max_episode_tokens >= 1,
            "tools.max_episode_tokens",
            self.max_episode_tokens,
            "must be >= 1",
        )
        _check(self.timeout_s > 0, "tools.timeout_s", self.timeout_s, "must be > 0")
        _check(self.max_in_flight >= 1, "tools.max_in_flight", self.max_in_flight, "must be >= 1")
        _check(
            self.max_response_chars >= 1,
            "tools.max_response_chars",
            self.max_response_chars,
            "must be >= 1",
        )
