"""`ToolRunner`: tool calls run on the runner's own thread with veRL's per-episode lifecycle
(create on first use, execute per call, calc_reward and release at the end), under a time limit
and a cap on calls at once, and never block the caller."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Hashable
from typing import Any

import pytest

from pivot.tools.calls import ToolCall, parse_tool_calls
from pivot.tools.runner import TRUNCATED, ToolResults, ToolRunner

THREAD = "pivot-tool-runner"


def call(name: str, **arguments: Any) -> ToolCall:
    return ToolCall(name, arguments, f"<tool_call>{name}</tool_call>")


def wait_for(runner: ToolRunner, n: int, timeout_s: float = 5.0) -> list[ToolResults]:
    """The next `n` results (polled, as the RL flow polls)."""
    out: list[ToolResults] = []
    deadline = time.monotonic() + timeout_s
    while len(out) < n:
        assert time.monotonic() < deadline, f"got {len(out)} of {n} results: {out}"
        out += runner.poll()
        time.sleep(0.002)
    return out


class Recorder:
    """A stateful tool that logs every lifecycle call: an instance counts its executes."""

    def __init__(self, name: str = "rec", reward: float = 0.5) -> None:
        self.name = name
        self.reward = reward
        self.log: list[tuple[str, Any]] = []
        self.counts: dict[str, int] = {}
        self._next = 0

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, None]:
        self._next += 1
        iid = f"{self.name}-{self._next}"
        self.counts[iid] = 0
        self.log.append(("create", (iid, kwargs)))
        return iid, None

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[str, float, dict]:
        await asyncio.sleep(float(parameters.get("sleep", 0.0)))
        self.counts[instance_id] += 1
        self.log.append(("execute", (instance_id, parameters, kwargs)))
        return f"{instance_id}#{self.counts[instance_id]}", 0.25, {}

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        self.log.append(("calc_reward", (instance_id, kwargs)))
        return self.reward

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self.log.append(("release", (instance_id, kwargs)))
        del self.counts[instance_id]

    def calls(self, what: str) -> list[Any]:
        return [args for kind, args in self.log if kind == what]


class Sleeper(Recorder):
    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[str, float, dict]:
        await asyncio.sleep(parameters["s"])
        return "slept", 0.0, {}


class Failing(Recorder):
    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[str, float, dict]:
        raise RuntimeError("boom\n  with a traceback-like second line")


class Concurrency(Recorder):
    """Each call waits until `target` calls are running at once (or a second has passed)."""

    def __init__(self, target: int) -> None:
        super().__init__("conc")
        self.target = target
        self.now = self.peak = 0

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[str, float, dict]:
        self.now += 1
        self.peak = max(self.peak, self.now)
        deadline = time.monotonic() + 1.0
        while self.peak < self.target and time.monotonic() < deadline:
            await asyncio.sleep(0.002)
        await asyncio.sleep(0.005)
        self.now -= 1
        return "ok", 0.0, {}


def runner(tools: dict[str, Any], **kw: Any) -> ToolRunner:
    args: dict[str, Any] = dict(timeout_s=5.0, max_in_flight=8, max_response_chars=1000)
    return ToolRunner(tools, **(args | kw))


def test_timeout_is_one_error_line_and_the_runner_goes_on() -> None:
    tool = Sleeper("sleep")
    with runner({"sleep": tool}, timeout_s=0.1) as r:
        start = time.monotonic()
        r.run_calls("e", [call("sleep", s=5.0), call("sleep", s=0.0)], {})
        [res] = wait_for(r, 1)
        assert time.monotonic() - start < 2.0
        assert res.responses == ["Error: tool sleep timed out after 0.1 s", "slept"]
        assert (res.errors, res.step_rewards, res.kind) == (1, [0.0, 0.0], "calls")
        s = r.stats
        assert (s.calls, s.errors, s.timeouts, s.in_flight) == (2, 1, 1, 0)
        r.run_calls("e", [call("sleep", s=0.0)], {})
        assert wait_for(r, 1)[0].responses == ["slept"]


def test_exception_is_one_error_line() -> None:
    tool = Failing("fail")
    with runner({"fail": tool}) as r:
        r.run_calls(1, [call("fail")], {})
        [res] = wait_for(r, 1)
        assert res.responses == ["Error: tool fail failed: RuntimeError: boom"]
        assert (res.errors, r.stats.errors, r.stats.timeouts) == (1, 1, 0)


def test_unparsed_and_unknown_calls_are_answered_without_calling_a_tool() -> None:
    tool = Recorder()
    _, [bad] = parse_tool_calls("<tool_call>{not json}</tool_call>")
    with runner({"rec": tool}) as r:
        r.run_calls("e", [bad, call("nope"), call("rec")], {})
        [res] = wait_for(r, 1)
    assert res.responses[0].startswith("Error: tool call is not valid JSON")
    assert res.responses[1] == "Error: no tool named 'nope' (tools: rec)"
    assert res.responses[2] == "rec-1#1"
    assert res.errors == 2 and res.step_rewards == [0.0, 0.0, 0.25]
    # close() released the episode left open
    assert [kind for kind, _ in tool.log] == ["create", "execute", "release"]


@pytest.mark.parametrize("cap", [2, 16])
def test_cap_on_calls_in_flight_across_episodes(cap: int) -> None:
    tool = Concurrency(target=min(cap, 12))
    with runner({"conc": tool}, max_in_flight=cap) as r:
        for episode in range(4):
            r.run_calls(episode, [call("conc") for _ in range(3)], {})
        assert len(wait_for(r, 4)) == 4
        assert r.stats.calls == 12
    assert tool.peak == min(cap, 12)  # never more than the cap, and the cap is reached


def test_run_calls_and_poll_do_not_wait() -> None:
    tool = Sleeper("sleep")
    with runner({"sleep": tool}) as r:
        start = time.monotonic()
        r.run_calls("e", [call("sleep", s=0.3)], {})  # starts the runner's thread too
        assert r.poll() == []
        assert time.monotonic() - start < 0.25
        deadline = time.monotonic() + 2.0
        while r.stats.in_flight == 0:
            assert time.monotonic() < deadline
            time.sleep(0.002)
        start = time.monotonic()
        assert r.poll() == []  # the call is running: nothing to wait for
        assert time.monotonic() - start < 0.05
        assert len(wait_for(r, 1)) == 1


def test_episode_lifecycle_and_finish() -> None:
    a, b = Recorder("a", reward=0.5), Recorder("b", reward=2.0)
    kwargs = {
        "a": {"create_kwargs": {"ground_truth": "72"}, "calc_reward_kwargs": {"k": 1}},
        "b": {"execute_kwargs": {"mode": "x"}},
    }
    with runner({"a": a, "b": b}) as r:
        r.run_calls("e1", [call("a", n=1), call("a", n=2), call("b")], kwargs)
        r.run_calls("e2", [call("a")], {})
        first = wait_for(r, 2)
        r.run_calls("e1", [call("a", n=3)], {})  # later turns keep the first turn's kwargs
        [second] = wait_for(r, 1)
        r.finish("e1")
        r.finish("never-called-a-tool")
        ends = {res.episode: res for res in wait_for(r, 2)}
        released = list(a.calls("release"))
    by_episode = {res.episode: res for res in first}
    assert sorted(by_episode["e1"].responses) == ["a-1#1", "a-1#2", "b-1#1"]
    assert by_episode["e1"].step_rewards == [0.25, 0.25, 0.25]
    assert second.responses == ["a-1#3"]
    # one instance per tool per episode, created with veRL's create_kwargs keyword
    assert a.calls("create") == [
        ("a-1", {"create_kwargs": {"ground_truth": "72"}}),
        ("a-2", {"create_kwargs": {}}),
    ]
    assert b.calls("create") == [("b-1", {"create_kwargs": {}})]
    assert b.calls("execute") == [("b-1", {}, {"mode": "x"})]
    # finish: calc_reward then release, once per instance the episode created
    assert a.calls("calc_reward") == [("a-1", {"k": 1})]
    assert b.calls("calc_reward") == [("b-1", {})]
    assert released == [("a-1", {})] and b.calls("release") == [("b-1", {})]
    assert [k for k, (iid, *_) in a.log if iid == "a-1"][-2:] == ["calc_reward", "release"]
    assert (ends["e1"].kind, ends["e1"].final_reward, ends["e1"].errors) == ("finish", 2.5, 0)
    assert (ends["e1"].responses, ends["e1"].step_rewards) == ([], [])
    assert ends["never-called-a-tool"].final_reward == 0.0
    assert a.calls("release")[1:] == [("a-2", {})]  # e2 was still open: close() released it


def test_finish_waits_for_the_turn_in_flight() -> None:
    tool = Recorder()
    with runner({"rec": tool}) as r:
        r.run_calls("e", [call("rec", sleep=0.1)], {})
        r.finish("e")
        results = wait_for(r, 2)
    assert [res.kind for res in results] == ["calls", "finish"]
    assert [kind for kind, _ in tool.log] == ["create", "execute", "calc_reward", "release"]


def test_finish_counts_failing_calc_reward_and_release() -> None:
    class Bad(Recorder):
        async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
            raise ValueError("no state")

        async def release(self, instance_id: str, **kwargs: Any) -> None:
            raise KeyError(instance_id)

    with runner({"rec": Bad()}) as r:
        r.run_calls("e", [call("rec")], {})
        r.finish("e")
        end = wait_for(r, 2)[1]
        assert (end.final_reward, end.errors, r.stats.errors) == (0.0, 2, 2)


def test_drop_releases_without_calc_reward_and_discards_results() -> None:
    tool = Recorder()
    with runner({"rec": tool}) as r:
        r.run_calls("e", [call("rec")], {})
        wait_for(r, 1)
        r.run_calls("e", [call("rec", sleep=5.0)], {})  # in flight when dropped
        time.sleep(0.05)
        r.drop("e")
        deadline = time.monotonic() + 2.0
        while not tool.calls("release"):
            assert time.monotonic() < deadline
            time.sleep(0.005)
        assert tool.calls("release") == [("rec-1", {})]
        assert tool.calls("calc_reward") == []
        # a new attempt under the same key starts afresh
        r.run_calls("e", [call("rec")], {})
        [res] = wait_for(r, 1)
        assert res.responses == ["rec-2#1"]
        time.sleep(0.05)
        assert r.poll() == []


def test_long_responses_are_cut_with_a_marker() -> None:
    class Long(Recorder):
        async def execute(
            self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
        ) -> tuple[Any, float, dict]:
            return type("Response", (), {"text": "x" * 50})(), 1.0, {}

    with runner({"rec": Long()}, max_response_chars=10) as r:
        r.run_calls("e", [call("rec")], {})
        [res] = wait_for(r, 1)
    assert res.responses == ["x" * 10 + TRUNCATED] and res.step_rewards == [1.0]


def test_a_sync_tool_runs_off_the_loop() -> None:
    class Sync:
        name = "sync"

        def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, None]:
            return "s", None

        def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs: Any) -> str:
            return threading.current_thread().name

        def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
            return 1.0

        def release(self, instance_id: str, **kwargs: Any) -> None:
            return None

    with runner({"sync": Sync()}) as r:
        r.run_calls("e", [call("sync")], {})
        r.finish("e")
        calls, end = wait_for(r, 2)
    assert calls.responses[0] != THREAD and end.final_reward == 1.0


def test_close_joins_the_thread_and_releases_open_episodes() -> None:
    tool = Recorder()
    before = set(threading.enumerate())
    r = runner({"rec": tool})
    assert set(threading.enumerate()) == before  # the thread starts on first use
    r.run_calls("open", [call("rec")], {})
    wait_for(r, 1)
    [thread] = [t for t in threading.enumerate() if t not in before]
    assert thread.name == THREAD and thread.daemon
    r.close()
    assert not thread.is_alive() and thread not in threading.enumerate()
    assert tool.calls("release") == [("rec-1", {})] and tool.calls("calc_reward") == []
    r.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        r.run_calls("open", [call("rec")], {})
    assert r.stats.tool_seconds > 0


def test_bad_settings() -> None:
    with pytest.raises(ValueError, match="timeout_s=0"):
        runner({}, timeout_s=0)
    with pytest.raises(ValueError, match="max_in_flight=0"):
        runner({}, max_in_flight=0)


def test_episode_keys_are_any_hashable() -> None:
    key: Hashable = (3, "sample", 1)
    with runner({"rec": Recorder()}) as r:
        r.run_calls(key, [call("rec")], {})
        assert wait_for(r, 1)[0].episode == key
