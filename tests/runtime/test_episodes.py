"""Episodes (pivot/runtime/flow/episodes.py) over a scripted tool runner and the tiny tools chat
template: tokens, mask, log-probs and versions across turns; every way an episode ends."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from pivot.config.tools import ToolsConfig
from pivot.engine import Output
from pivot.engine.sequence import VersionRanges
from pivot.model import TextTokenizer
from pivot.runtime.flow.episodes import Episodes
from pivot.tiny import tools_task as task
from pivot.tiny.shipped import WEIGHTS
from pivot.tools.calls import ToolCall

KEY = (0, 0, 0)
PROMPT = "Problem: 47+85=?\n"


@dataclass
class Results:
    episode: Any
    kind: str
    responses: list[str] = field(default_factory=list)
    step_rewards: list[float] = field(default_factory=list)
    errors: int = 0
    final_reward: float = 0.0


class ScriptedRunner:
    """Answers each call with the calculator's result at the next poll; records what it was asked."""

    def __init__(self, errors: int = 0, final_reward: float = 0.0) -> None:
        self.asked: list[tuple[Any, list[ToolCall]]] = []
        self.finished: list[Any] = []
        self.dropped: list[Any] = []
        self.ready: list[Results] = []
        self.errors, self.final_reward = errors, final_reward

    def run_calls(self, episode: Any, calls: list[ToolCall], tools_kwargs: dict) -> None:
        self.asked.append((episode, calls))
        answers = [str(eval(c.arguments["expr"])) for c in calls]  # noqa: S307 (test digits only)
        self.ready.append(Results(episode, "calls", answers, [0.1] * len(calls), self.errors))

    def finish(self, episode: Any) -> None:
        self.finished.append(episode)
        self.ready.append(Results(episode, "finish", final_reward=self.final_reward))

    def drop(self, episode: Any) -> None:
        self.dropped.append(episode)

    def poll(self) -> list[Results]:
        out, self.ready = self.ready, []
        return out

    def close(self) -> None:
        pass


@pytest.fixture
def tok() -> TextTokenizer:
    t = TextTokenizer.from_pretrained(WEIGHTS / "policy")
    t.chat_template = task.CHAT_TEMPLATE
    t.special_tokens = {"eos_token": "<|endoftext|>"}
    return t


def turn(tok: TextTokenizer, text: str, version: int = 0, eos: bool = True) -> Output:
    ids = tok.encode(text) + ([tok.eos_id] if eos else [])
    return Output(
        1,
        [],
        ids,
        [-0.5] * len(ids),
        "stop" if eos else "length",
        version,
        VersionRanges(((version, 0),)),
    )


def episodes(tok: TextTokenizer, runner: ScriptedRunner, **cfg: Any) -> Episodes:
    return Episodes(ToolsConfig(config="x.yaml", **cfg), tok, runner, [], max_new_tokens=96)


def test_a_call_then_an_answer(tok: TextTokenizer) -> None:
    runner = ScriptedRunner(final_reward=1.0)
    eps = episodes(tok, runner)
    prompt = tok.encode(PROMPT)
    eps.open(KEY, prompt, [{"role": "user", "content": PROMPT}], {"calc": {"create_kwargs": {}}})
    call = '<tool_call>{"name": "calc", "arguments": {"expr": "47+85"}}</tool_call>'
    eps.on_turn(KEY, turn(tok, call, version=3), 3)
    assert runner.asked[0][1][0].name == "calc"
    going, ended = eps.poll()
    assert [e.key for e in going] == [KEY] and not ended
    ep = going[0]
    reply = tok.encode(task.tool_reply_text("132"))
    assert ep.prompt_and_response == prompt + tok.encode(call) + [tok.eos_id] + reply
    assert ep.mask == [1] * (len(tok.encode(call)) + 1) + [0] * len(reply)
    assert eps.budget(ep) == min(96, 1024 - len(ep.response_ids))
    eps.on_turn(KEY, turn(tok, "Answer: 132", version=4), 4)  # after a weights update
    assert runner.finished == [
        0
    ]  # the episode's id  # its tools' calc_reward and release, before it ends
    going, ended = eps.poll()
    (ep,) = ended
    assert tok.decode(ep.response_ids) == call + task.tool_reply_text("132") + "Answer: 132"
    assert len(ep.mask) == len(ep.response_ids) == len(ep.logprobs)
    assert [lp for lp, m in zip(ep.logprobs, ep.mask) if not m] == [0.0] * len(reply)
    first = len(tok.encode(call)) + 1 + len(reply)
    assert ep.version_starts == [(3, 0), (4, first)] and ep.version == 3
    assert (ep.turns, ep.tool_calls, ep.tool_errors) == (2, 1, 0)
    assert ep.tool_reward == pytest.approx(1.1)  # the call's step reward and calc_reward
    assert ep.last_turn == "Answer: 132" and KEY not in eps.live


def test_an_answer_alone_ends_without_the_runner(tok: TextTokenizer) -> None:
    runner = ScriptedRunner()
    eps = episodes(tok, runner)
    eps.open(KEY, tok.encode(PROMPT), [], {})
    eps.on_turn(KEY, turn(tok, "7+5+0=2 c1\nAnswer: 132"), 0)
    going, (ep,) = eps.poll()
    assert not going and runner.finished == [] and ep.mask == [1] * len(ep.response_ids)
    assert eps.counts.episodes == 1 and eps.counts.truncated == 0


@pytest.mark.parametrize("limit", ["turns", "tokens", "cut"])
def test_limits_end_the_episode_with_what_it_made(tok: TextTokenizer, limit: str) -> None:
    runner = ScriptedRunner()
    cfg = {"turns": {"max_turns": 1}, "tokens": {"max_episode_tokens": 80}, "cut": {}}[limit]
    eps = episodes(tok, runner, **cfg)
    eps.open(KEY, tok.encode(PROMPT), [], {})
    call = '<tool_call>{"name": "calc", "arguments": {"expr": "47+85"}}</tool_call>'
    eps.on_turn(KEY, turn(tok, call, eos=limit != "cut"), 0)
    if limit == "tokens":  # the call ran; its reply used up the episode's tokens
        assert runner.asked and eps.poll() == ([], [])
    else:  # the last turn's (or a cut turn's) call is not run
        assert not runner.asked
    going, ended = eps.poll()
    assert not going and [e.key for e in ended] == [KEY]
    assert eps.counts.truncated == 1


def test_a_regenerated_sample_drops_its_episode(tok: TextTokenizer) -> None:
    runner = ScriptedRunner()
    eps = episodes(tok, runner)
    eps.open(KEY, tok.encode(PROMPT), [], {})
    eps.on_turn(
        KEY, turn(tok, '<tool_call>{"name": "calc", "arguments": {"expr": "1+1"}}</tool_call>'), 0
    )
    eps.open(KEY, tok.encode(PROMPT), [], {})  # stale: regenerated from the prompt
    assert runner.dropped == [0]
    assert eps.poll() == ([], [])  # the old episode's tool results are ignored
    assert eps.live[KEY].response_ids == []
