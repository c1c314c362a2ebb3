"""Multi-turn episodes on rank 0: a rollout sample made of turns, with tool calls between them.

The RL flow (pivot/runtime/flow/rl_flow.py) hands each finished turn here. A turn is an ordinary
rollout sequence: its prompt is the episode's prompt plus everything after it so far, so it can
be aborted, migrated, salvaged from a failed engine or resumed anywhere like any sequence (an
engine with prefix caching reuses the K/V of the turns before). Between turns the episode lives
only here, while its tools run on `ToolRunner`'s thread; no replica holds it, so a shift
between turns moves nothing.

Each token after the prompt is the policy's (mask 1: trained on, with its log-prob and weights
version) or the template's and tools' (mask 0: tool responses and the text around them, never
in the loss, the mismatch figures or the rollout correction).

An episode ends at a turn without a tool call, at `tools.max_turns` turns (the last turn's calls
are not run), when it has `tools.max_episode_tokens` tokens after its prompt, or when a turn is
cut by its token budget (it closed no call). Then each tool the episode created is asked for
its `calc_reward` and released, and the episode is finished.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from pivot.config.tools import ToolsConfig
from pivot.engine import Output
from pivot.model import TextTokenizer
from pivot.rl.buffer import Key
from pivot.tools.calls import ToolCall, parse_tool_calls
from pivot.tools.render import assistant_message, tool_reply_ids


class ToolResultsLike(Protocol):
    episode: Any
    kind: str
    responses: list[str]
    step_rewards: list[float]
    errors: int
    final_reward: float


class ToolRunnerLike(Protocol):
    """What episodes ask of `pivot.tools.runner.ToolRunner`."""

    def run_calls(self, episode: Any, calls: list[ToolCall], tools_kwargs: dict) -> None: ...

    def finish(self, episode: Any) -> None: ...

    def drop(self, episode: Any) -> None: ...

    def poll(self) -> list[Any]: ...

    def close(self) -> None: ...


@dataclass
class Episode:
    id: int
    """Unique per attempt (a regenerated sample's new episode has the same key, another id): what
    the tool runner knows it by, so a dropped attempt's late tool results find nothing."""
    key: Key
    prompt_ids: list[int]
    history: list[dict[str, Any]]
    """The conversation so far as chat messages (what the template renders tool replies after)."""
    tools_kwargs: dict[str, dict]
    """The data row's `extra_info.tools_kwargs` (veRL's: per tool, its `create_kwargs`)."""
    eval_step: int = -1
    response_ids: list[int] = field(default_factory=list)
    mask: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    version_starts: list[tuple[int, int]] = field(default_factory=list)
    version: int = -1
    """The oldest policy version that made any of its tokens."""
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    tool_reward: float = 0.0
    """Step rewards of its calls plus, once finished, each tool's `calc_reward`."""
    last_turn: str = ""
    """The last turn's text without its tool calls: what the judge sees with judge_sees=answer."""
    pending: list[ToolCall] = field(default_factory=list)
    """The calls of the latest turn (their responses are awaited)."""
    turn_end: int = -1
    """The latest turn's last token (its end-of-turn token)."""

    @property
    def prompt_and_response(self) -> list[int]:
        return self.prompt_ids + self.response_ids


@dataclass
class EpisodeCounts:
    episodes: int = 0
    turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    truncated: int = 0
    """Episodes ended by a limit (turns or tokens) rather than by a turn without a call."""


class Episodes:
    def __init__(
        self,
        cfg: ToolsConfig,
        tok: TextTokenizer,
        runner: ToolRunnerLike,
        schemas: list[dict[str, Any]],
        max_new_tokens: int,
    ) -> None:
        """`max_new_tokens`: rollout.max_new_tokens, the most one turn generates."""
        self.cfg, self.tok, self.runner, self.schemas = cfg, tok, runner, schemas
        self.max_new_tokens = max_new_tokens
        self.live: dict[Key, Episode] = {}
        self._by_id: dict[int, Episode] = {}
        self._next_id = 0
        self.counts = EpisodeCounts()
        self._ended: list[Episode] = []  # ended with no tool to finish: returned by the next poll

    def open(
        self,
        key: Key,
        prompt_ids: list[int],
        history: list[dict[str, Any]],
        tools_kwargs: dict[str, dict],
        eval_step: int = -1,
    ) -> Episode:
        """A new episode for `key` (one left from an earlier attempt is dropped: regenerated)."""
        self.drop(key)
        ep = Episode(self._next_id, key, list(prompt_ids), list(history), tools_kwargs, eval_step)
        self._next_id += 1
        self.live[key] = self._by_id[ep.id] = ep
        return ep

    def budget(self, ep: Episode) -> int:
        """Tokens the episode's next turn may generate."""
        return min(self.max_new_tokens, self.cfg.max_episode_tokens - len(ep.response_ids))

    def on_turn(self, key: Key, out: Output, version: int) -> None:
        """A turn finished (made by policy `version` at oldest): its tool calls start, or the
        episode ends; either way `poll` reports what follows."""
        ep = self.live[key]
        offset = len(ep.response_ids)
        ep.response_ids += out.output_ids
        ep.mask += [1] * len(out.output_ids)
        ep.logprobs += list(out.output_logprobs)
        for v, start in out.versions.starts:
            if not ep.version_starts or ep.version_starts[-1][0] != v:
                ep.version_starts.append((v, offset + start))
        ep.version = version if ep.version < 0 else min(ep.version, version)
        ep.turns += 1
        self.counts.turns += 1
        text = self.tok.decode(list(out.output_ids))
        content, calls = parse_tool_calls(text, self.cfg.format)
        ep.last_turn = content
        ended_turn = bool(out.output_ids) and out.output_ids[-1] in self.tok.eos_ids
        if not calls or not ended_turn:  # an answer, or a turn cut by its budget
            self.counts.truncated += bool(calls)
            return self._end(ep)
        if ep.turns >= self.cfg.max_turns or self.budget(ep) <= 0:
            self.counts.truncated += 1
            return self._end(ep)
        ep.history.append(assistant_message(content, calls))
        ep.pending, ep.turn_end = calls, out.output_ids[-1]
        ep.tool_calls += len(calls)
        self.counts.tool_calls += len(calls)
        self.runner.run_calls(ep.id, calls, ep.tools_kwargs)

    def _end(self, ep: Episode) -> None:
        if ep.tool_calls:  # it created tool instances: their calc_reward, then release
            self.runner.finish(ep.id)
        else:
            self._ended.append(ep)

    def poll(self) -> tuple[list[Episode], list[Episode]]:
        """(episodes whose tool responses are in: ready for their next turn, episodes that
        ended), since the last poll."""
        going, ended = [], self._ended
        self._ended = []
        for res in self.runner.poll():
            ep = self._by_id.get(res.episode)
            if ep is None:  # dropped meanwhile (a regenerated sample)
                continue
            ep.tool_reward += sum(res.step_rewards) + res.final_reward
            ep.tool_errors += res.errors
            self.counts.tool_errors += res.errors
            if res.kind == "finish":
                ended.append(ep)
                continue
            reply = tool_reply_ids(self.tok, ep.history, res.responses, self.schemas, ep.turn_end)
            ep.history += [{"role": "tool", "content": r} for r in res.responses]
            ep.response_ids += reply
            ep.mask += [0] * len(reply)
            ep.logprobs += [0.0] * len(reply)
            ep.pending = []
            if self.budget(ep) <= 0:  # the replies used up the episode's tokens
                self.counts.truncated += 1
                self._end(ep)
            else:
                going.append(ep)
        for ep in ended:
            self._forget(ep)
            self.counts.episodes += 1
        return going, ended

    def drop(self, key: Key) -> None:
        """Forget `key`'s episode (its sample is regenerated or dropped); its tools are released."""
        ep = self.live.get(key)
        if ep is not None:
            self._forget(ep)
            if ep.tool_calls:
                self.runner.drop(ep.id)

    def _forget(self, ep: Episode) -> None:
        self._by_id.pop(ep.id, None)
        if self.live.get(ep.key) is ep:
            del self.live[ep.key]
