"""Run the tools a policy calls, off the engine's thread, one episode's state across its turns.

Rank 0's RL flow is plain Python bookkeeping driven by a loop it must never stall: an episode's
turn ends, the flow parses its tool calls (`pivot.tools.calls`) and hands them here
(`run_calls`), goes on with the other episodes, and picks the answers up later (`poll`) to
append them and let the policy continue. The tools run as coroutines on one asyncio event loop
that the runner owns, on a daemon thread started on first use; nothing here blocks the caller
except `close()`.

Tools follow veRL's contract (`verl.tools.base_tool.BaseTool`; any object with the same four
coroutine methods will do), with per-episode instances as veRL's multi-turn sglang rollout
keeps them (verl/workers/rollout/sglang_rollout/sglang_rollout.py, 0.6.1): an episode's first
call of a tool creates its instance, later calls in the episode reuse it, and at the episode's
end (`finish`) its reward is read (`calc_reward`) and it is released. `create` is called as
veRL's agent loop calls it, with the keyword `create_kwargs` (the sample's
`tools_kwargs[name]["create_kwargs"]`; veRL's gsm8k tool reads its ground truth there); as in
that rollout, `execute_kwargs`, `calc_reward_kwargs` and `release_kwargs` of the same entry
are spread into the other three calls.

Every call a tool gets runs under a time limit (`timeout_s`) and a cap shared by all episodes
(`max_in_flight` tool methods at once). A call that cannot be answered (a block that did not
parse, an unknown tool, an exception, a timeout) is answered with one line `Error: ...`, and the
episode goes on: the model reads why its call did nothing.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import queue
import threading
import time
from collections.abc import Callable, Coroutine, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pivot.tools.calls import ToolCall

log = logging.getLogger(__name__)

TRUNCATED = "...(truncated)"
"""Appended to a response cut to `max_response_chars` (veRL's marker for the same cut)."""


@dataclass(frozen=True)
class ToolResults:
    """What one `run_calls` or `finish` of an episode gave."""

    episode: Hashable
    kind: Literal["calls", "finish"]
    responses: list[str]
    """One text per call, in call order (calls); empty (finish)."""
    step_rewards: list[float]
    """The step reward `execute` gave each call (0.0 for a call answered with an error)."""
    errors: int
    """Calls answered with an error (calls); failed calc_reward/release calls (finish)."""
    final_reward: float = 0.0
    """finish: the sum of `calc_reward` over the episode's tool instances; 0.0 for calls."""


@dataclass(frozen=True)
class ToolStats:
    """The runner's counts since it was made."""

    calls: int
    """Tool calls answered, errors included."""
    errors: int
    """Tool calls or lifecycle calls (create, calc_reward, release) that failed, timeouts and
    calls that did not parse or named no tool included."""
    timeouts: int
    """Tool methods stopped at `timeout_s` (also counted in `errors`)."""
    in_flight: int
    """Tool methods running now."""
    tool_seconds: float
    """Wall time spent inside tool methods, summed over all of them."""


class _ToolTimeout(Exception):
    """The runner's time limit stopped a tool method (a TimeoutError the tool raised itself is
    an ordinary failure)."""


@dataclass
class _Instance:
    """One tool's instance in one episode."""

    created: asyncio.Task[Any]
    """The `create` call; its result is the instance id. Shielded from the cancellation of the
    calls that wait for it, so an instance created is always known and can be released."""
    kwargs: Mapping[str, Any]
    """The episode's `tools_kwargs` entry for the tool, as given on its first call."""


@dataclass
class _Episode:
    """An episode's tool state; touched only on the runner's loop."""

    key: Hashable
    instances: dict[str, _Instance] = field(default_factory=dict)
    tail: asyncio.Task[None] | None = None
    """The last operation scheduled: the next one starts after it ends, so an episode's turns
    and its finish run in the order given."""
    ops: set[asyncio.Task[None]] = field(default_factory=set)
    live: bool = True
    """False once dropped: its results are no longer posted."""


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return f"{type(e).__name__}: {text.splitlines()[0]}" if text else type(e).__name__


def _response(result: Any) -> tuple[str, float]:
    """The text and step reward of what `execute` returned: veRL's (ToolResponse, reward,
    metrics), or a bare ToolResponse or str (reward 0). Images and videos are not passed on:
    the policy here reads text."""
    if isinstance(result, tuple):
        response = result[0] if result else None
        reward = result[1] if len(result) > 1 else 0.0
    else:
        response, reward = result, 0.0
    text = response if isinstance(response, str) else getattr(response, "text", None)
    step = float(reward)
    if not math.isfinite(step):
        raise ValueError(f"step reward {step} is not finite")
    return ("" if text is None else str(text)), step


class ToolRunner:
    """Runs tool calls for many episodes at once on its own event loop thread (the module
    docstring has the contract). Usable as a context manager, which closes it."""

    def __init__(
        self,
        tools: Mapping[str, Any],
        *,
        timeout_s: float,
        max_in_flight: int,
        max_response_chars: int,
    ) -> None:
        if not timeout_s > 0:
            raise ValueError(f"timeout_s={timeout_s!r}: must be > 0")
        if max_in_flight < 1:
            raise ValueError(f"max_in_flight={max_in_flight!r}: must be >= 1")
        if max_response_chars < 1:
            raise ValueError(f"max_response_chars={max_response_chars!r}: must be >= 1")
        self._tools = dict(tools)
        self._timeout_s = float(timeout_s)
        self._max_response_chars = max_response_chars
        self._results: queue.SimpleQueue[ToolResults] = queue.SimpleQueue()
        # guards starting and closing the loop, and the counters the loop updates and `stats`
        # reads from the caller's thread
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._closed = False
        self._calls = self._errors = self._timeouts = self._in_flight = 0
        self._tool_seconds = 0.0
        # loop-only state (asyncio's primitives bind to the loop on first use, 3.10+)
        self._sem = asyncio.Semaphore(max_in_flight)
        self._episodes: dict[Hashable, _Episode] = {}
        self._background: set[asyncio.Task[None]] = set()

    # --- the caller's side -------------------------------------------------------------------

    def run_calls(
        self,
        episode: Hashable,
        calls: Sequence[ToolCall],
        tools_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        """Schedule the calls of one turn of `episode` (they run concurrently; their answers
        come back in call order as one `ToolResults` of kind "calls"). `tools_kwargs` is the
        sample's veRL `tools_kwargs` (tool name -> {"create_kwargs": {...}, ...}); a tool's entry
        is read on the episode's first call of that tool. Returns at once."""
        self._submit(self._start_calls, episode, list(calls), dict(tools_kwargs or {}))

    def finish(self, episode: Hashable) -> None:
        """Schedule the end of `episode`, after its turns in flight: `calc_reward` then `release`
        of every tool instance it created; the result is one `ToolResults` of kind "finish"
        (also for an episode that called no tool). The episode is then forgotten. Returns at
        once."""
        self._submit(self._start_finish, episode)

    def drop(self, episode: Hashable) -> None:
        """Forget `episode` without reading its reward (it is being regenerated): its calls in
        flight are cancelled and give no results, its tool instances are released. Returns at
        once."""
        self._submit(self._start_drop, episode)

    def poll(self) -> list[ToolResults]:
        """The results completed since the last poll, in completion order; never waits."""
        out: list[ToolResults] = []
        while True:
            try:
                out.append(self._results.get_nowait())
            except queue.Empty:
                return out

    @property
    def stats(self) -> ToolStats:
        """A snapshot of the counts."""
        with self._lock:
            return ToolStats(
                calls=self._calls,
                errors=self._errors,
                timeouts=self._timeouts,
                in_flight=self._in_flight,
                tool_seconds=self._tool_seconds,
            )

    def close(self) -> None:
        """Stop the runner: drop the episodes still open (releasing their instances), let the
        finishes in progress end, stop the loop and join its thread. Each tool method still
        runs under `timeout_s`; a synchronous tool method (run on a worker thread) that hangs
        past it holds this until it returns. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        if threading.current_thread() is thread:
            raise RuntimeError("ToolRunner.close() called from a tool on the runner's own loop")
        done = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
        try:
            # each step of each episode is bounded by timeout_s; past a generous multiple of
            # it the loop is stopped anyway and its leftover tasks are cancelled
            done.result(timeout=4 * self._timeout_s + 5.0)
        except Exception:
            pass
        loop.call_soon_threadsafe(loop.stop)
        thread.join()

    def __enter__(self) -> ToolRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- the loop's thread -------------------------------------------------------------------

    def _submit(self, fn: Callable[..., None], *args: Any) -> None:
        with self._lock:
            if self._closed:
                raise RuntimeError("ToolRunner is closed")
            if self._loop is None:
                loop = asyncio.new_event_loop()
                thread = threading.Thread(
                    target=self._serve, args=(loop,), name="pivot-tool-runner", daemon=True
                )
                self._loop, self._thread = loop, thread
                thread.start()
            # FIFO from one thread: an episode's run_calls, finish and drop arrive in order
            self._loop.call_soon_threadsafe(fn, *args)

    def _serve(self, loop: asyncio.AbstractEventLoop) -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            leftover = asyncio.all_tasks(loop)
            for task in leftover:
                task.cancel()
            if leftover:
                loop.run_until_complete(asyncio.gather(*leftover, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
            loop.close()

    def _post(self, results: ToolResults) -> None:
        self._results.put(results)

    def _count(self, *, calls: int = 0, errors: int = 0, timeouts: int = 0) -> None:
        with self._lock:
            self._calls += calls
            self._errors += errors
            self._timeouts += timeouts

    def _track(self, task: asyncio.Task[None]) -> None:
        self._background.add(task)
        task.add_done_callback(self._reap)

    def _reap(self, task: asyncio.Task[None]) -> None:
        self._background.discard(task)
        # every tool failure is answered inside the task, so one that escapes is the runner's
        # own bug: say it (its episode's results are missing) rather than lose it
        if not task.cancelled() and task.exception() is not None:
            log.error("tool runner task failed", exc_info=task.exception())

    def _chain(
        self, ep: _Episode, fn: Callable[..., Coroutine[Any, Any, None]], *args: Any
    ) -> None:
        prev = ep.tail

        async def after_prev() -> None:
            if prev is not None:  # waits for it to end, whatever way it ends
                await asyncio.wait([prev])
            await fn(*args)

        task = asyncio.get_running_loop().create_task(after_prev())
        ep.tail = task
        ep.ops.add(task)
        task.add_done_callback(ep.ops.discard)
        self._track(task)

    def _start_calls(
        self, episode: Hashable, calls: list[ToolCall], tools_kwargs: dict[str, Any]
    ) -> None:
        ep = self._episodes.get(episode)
        if ep is None:
            ep = self._episodes[episode] = _Episode(episode)
        self._chain(ep, self._turn, ep, calls, tools_kwargs)

    def _start_finish(self, episode: Hashable) -> None:
        ep = self._episodes.pop(episode, None)
        if ep is None:
            self._post(ToolResults(episode, "finish", [], [], 0, 0.0))
            return
        self._chain(ep, self._finish, ep)

    def _start_drop(self, episode: Hashable) -> None:
        ep = self._episodes.pop(episode, None)
        if ep is not None:
            self._discard(ep)

    def _discard(self, ep: _Episode) -> None:
        ep.live = False
        ops = list(ep.ops)
        for task in ops:
            task.cancel()
        self._track(asyncio.get_running_loop().create_task(self._release_all(ep, ops)))

    async def _shutdown(self) -> None:
        for ep in list(self._episodes.values()):
            self._discard(ep)
        self._episodes.clear()
        while self._background:  # finishes in progress, and the releases just started
            await asyncio.wait(list(self._background))

    async def _invoke(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call one tool method under the cap and the time limit."""
        async with self._sem:
            with self._lock:
                self._in_flight += 1
            start = time.perf_counter()
            limit = asyncio.timeout(self._timeout_s)
            try:
                async with limit:
                    if inspect.iscoroutinefunction(fn):
                        result = await fn(*args, **kwargs)
                    else:  # a synchronous tool must not stall the other tools on this loop
                        result = await asyncio.to_thread(fn, *args, **kwargs)
                    if inspect.isawaitable(result):  # a wrapper that returns the coroutine
                        result = await result
                return result
            except TimeoutError:
                if limit.expired():
                    with self._lock:
                        self._timeouts += 1
                    raise _ToolTimeout() from None
                raise
            finally:
                with self._lock:
                    self._in_flight -= 1
                    self._tool_seconds += time.perf_counter() - start

    async def _create(self, tool: Any, kwargs: Mapping[str, Any]) -> Any:
        result = await self._invoke(tool.create, create_kwargs=kwargs.get("create_kwargs", {}))
        # veRL's create returns (instance_id, ToolResponse); its first versions the id alone
        return result[0] if isinstance(result, tuple) else result

    async def _instance_id(
        self, ep: _Episode, name: str, tool: Any, tools_kwargs: Mapping[str, Any]
    ) -> tuple[Any, _Instance]:
        inst = ep.instances.get(name)
        if inst is None:
            kwargs = tools_kwargs.get(name) or {}
            task = asyncio.get_running_loop().create_task(self._create(tool, kwargs))
            inst = ep.instances[name] = _Instance(task, kwargs)
        try:
            return await asyncio.shield(inst.created), inst
        except Exception:
            # nothing was created: the tool's next call in this episode tries again
            if ep.instances.get(name) is inst:
                del ep.instances[name]
            raise

    def _error(self, name: str, e: BaseException) -> str:
        if isinstance(e, _ToolTimeout):
            return f"Error: tool {name} timed out after {self._timeout_s:g} s"
        return f"Error: tool {name} failed: {_first_line(e)}"

    async def _answer(
        self, ep: _Episode, call: ToolCall, tools_kwargs: Mapping[str, Any]
    ) -> tuple[str, float, bool]:
        """One call's response text, step reward and whether it is an error."""
        if call.error:
            self._count(calls=1, errors=1)
            return f"Error: {call.error}", 0.0, True
        tool = self._tools.get(call.name)
        if tool is None:
            self._count(calls=1, errors=1)
            known = ", ".join(sorted(self._tools)) or "none"
            return f"Error: no tool named {call.name!r} (tools: {known})", 0.0, True
        try:
            instance_id, inst = await self._instance_id(ep, call.name, tool, tools_kwargs)
            result = await self._invoke(
                tool.execute,
                instance_id,
                call.arguments or {},
                **inst.kwargs.get("execute_kwargs", {}),
            )
            text, step = _response(result)
        except Exception as e:
            self._count(calls=1, errors=1)
            return self._error(call.name, e), 0.0, True
        self._count(calls=1)
        if len(text) > self._max_response_chars:
            text = text[: self._max_response_chars] + TRUNCATED
        return text, step, False

    async def _turn(
        self, ep: _Episode, calls: list[ToolCall], tools_kwargs: dict[str, Any]
    ) -> None:
        answers = await asyncio.gather(*(self._answer(ep, c, tools_kwargs) for c in calls))
        if ep.live:
            self._post(
                ToolResults(
                    ep.key,
                    "calls",
                    [text for text, _, _ in answers],
                    [step for _, step, _ in answers],
                    sum(1 for _, _, failed in answers if failed),
                )
            )

    async def _end_instance(
        self, name: str, inst: _Instance, read_reward: bool
    ) -> tuple[float, int]:
        """calc_reward (when `read_reward`) then release one instance: its reward and the
        number of those calls that failed."""
        created = inst.created
        if not created.done():
            await asyncio.wait([created])
        if created.cancelled() or created.exception() is not None:
            return 0.0, 0  # never created (the call that asked for it got the error)
        instance_id = created.result()
        tool = self._tools[name]
        reward, failed = 0.0, 0
        if read_reward:
            try:
                reward = float(
                    await self._invoke(
                        tool.calc_reward, instance_id, **inst.kwargs.get("calc_reward_kwargs", {})
                    )
                )
            except Exception:
                reward, failed = 0.0, 1
        try:
            await self._invoke(tool.release, instance_id, **inst.kwargs.get("release_kwargs", {}))
        except Exception:
            failed += 1
        self._count(errors=failed)
        return reward, failed

    async def _finish(self, ep: _Episode) -> None:
        ends = await asyncio.gather(
            *(self._end_instance(n, inst, True) for n, inst in ep.instances.items())
        )
        ep.instances.clear()
        self._post(
            ToolResults(
                ep.key,
                "finish",
                [],
                [],
                sum(failed for _, failed in ends),
                sum(reward for reward, _ in ends),
            )
        )

    async def _release_all(self, ep: _Episode, ops: list[asyncio.Task[None]]) -> None:
        if ops:  # the cancelled calls end first, so no call creates an instance after this
            await asyncio.wait(ops)
        await asyncio.gather(
            *(self._end_instance(n, inst, False) for n, inst in ep.instances.items())
        )
        ep.instances.clear()
