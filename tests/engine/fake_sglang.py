"""A stand-in for `sglang.Engine` 0.5.23 on CPU, modelling what the adapter depends on as that
wheel's source does it (paths under sglang/srt/, lines of the 0.5.23 wheel;
tests/engine/test_sglang_contract.py checks the signatures used here against the same source):

- weight-update session: `begin_weight_update()` opens it, a second begin is refused,
  `end_weight_update()` closes it and is refused without one
  (managers/scheduler_components/weight_updater.py:309-335);
- `update_weights_from_tensor` outside a session answers success False with sglang's message
  (weight_updater.py:232-239); with `flush_cache=True` on a scheduler that is not idle the weights
  change but the call fails (weight_updater.py:120-133 via scheduler.py:5518-5547);
- a `load_format` the engine was not started with as a `custom_weight_loader` is refused
  (model_runner_components/weight_updater.py:374-380: NotImplementedError in the scheduler);
- every weight call answers `(success, message)`: the tokenizer manager merges the schedulers'
  outputs (managers/tokenizer_control_mixin.py:485-586, managers/communicator.py:106-110);
- the update waits for running streams: a stream holds the model-update lock's reader side for
  its whole life (managers/tokenizer_manager.py:941), begin/update take the writer side
  (tokenizer_control_mixin.py:471-483, 577-583);
- `release_memory_occupation` asserts a fully idle scheduler (weight_updater.py:337-341); idle
  includes the overlap scheduler's in-flight batch (scheduler.py:5337-5351), modelled as the
  scheduler staying busy `INFLIGHT_S` after a stream ends or is aborted;
- `tokenizer_manager.flush_cache(timeout_s)` answers once the scheduler is idle, or success False
  after the timeout (tokenizer_control_mixin.py:325-334, scheduler_components/flush_wrapper.py:22-61);
- `get_weights_by_name` answers None for models without it (model_executor/model_runner_components/
  weight_exporter.py:169-188; Qwen2/Qwen3 have none), else the first `truncate_size` rows;
- `tokenizer_manager.pause_generation(PauseGenerationReqInput(mode="in_place"))` stops the
  streams where they are, their K/V kept (tokenizer_manager.py:2267-2280, scheduler.py:5817-5830),
  `continue_generation(...)` lets them go on (tokenizer_manager.py:2282-2286); while paused the
  weight calls skip the model-update lock, so they do not wait for running streams
  (tokenizer_control_mixin.py:470-483, 580-586), and a new request waits for the continue
  (tokenizer_manager.py:938-939). Tokens depend on the weights: each closed weight-update
  session that changed them shifts every later token by `EPOCH_SHIFT`, running streams
  included (the same weights loaded again, e.g. after a release, change nothing);
- `async_generate(..., cache_salt=)` (entrypoints/engine.py:600): recorded per rid;
- `tokenizer_manager.abort_request(rid=...)` (tokenizer_manager.py:2241); a request the
  scheduler has finished is forgotten before its last chunk reaches the stream
  (`del self.rid_to_state[rid]` at tokenizer_manager.py:2774, the chunk queued at 2779), and an
  abort of a forgotten rid is dropped (2246-2253): `delivery_s` models that last chunk's way.
Generation: streams token (prompt length + i + EPOCH_SHIFT * epoch) % 50 with log-prob -i, one
per 1 ms, cumulatively.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import torch

EPOCH_SHIFT = 7
"""How far each weight update moves the fake's tokens (so a test sees which weights made one)."""
INFLIGHT_S = 0.02
"""How long the fake scheduler stays busy after its last stream ended (the overlap batch)."""
# sglang's own refusal messages (weight_updater.py:123-133, 235-238, 311-316, 325-329)
SESSION_OPEN = "a weight-update session is already open; call end_weight_update() first"
NO_SESSION = "no weight-update session is open; call begin_weight_update() first"
UPDATE_OUTSIDE = (
    "update_weights_from_tensor must run between begin_weight_update() and end_weight_update()"
)
FLUSH_REFUSED = (
    "Weights were updated, but the cache was not flushed because requests are still running or queued. "
    "Retract or finish them, then call /flush_cache."
)


@dataclass
class FlushCacheReqOutput:  # managers/io_struct.py:1859-1861
    success: bool
    message: str = ""


@dataclass
class PauseGenerationReqInput:  # managers/io_struct.py:1927-1946
    mode: str = "abort"


@dataclass
class ContinueGenerationReqInput:  # managers/io_struct.py:1949-1955
    torch_empty_cache: bool = True


class FakeSglang:
    built: list[FakeSglang] = []
    has_weights_by_name = True
    """False: the served class has no get_weights_by_name (sglang answers None)."""
    delivery_s = 0.0
    """Seconds between the scheduler finishing a request and its last chunk reaching the stream."""

    def __init__(self, **kwargs: object) -> None:
        self.kwargs = kwargs
        self.loop = asyncio.new_event_loop()
        self.aborted: set[str] = set()  # running streams told to stop
        self.ever_aborted: set[str] = set()
        self.live_rids: set[str] = set()
        self.updates: list[tuple[list[str], bool]] = []
        self.load_formats: list[str | None] = []
        self.weights: dict[str, torch.Tensor] = {}
        self.calls: list[str] = []
        self.replies: list[tuple[str, tuple[bool, str]]] = []
        self.session = False
        self.streams = 0
        self.busy_until = 0.0
        self.paused = False
        self.epoch = 0  # weight-update sessions closed so far that changed the weights
        self.changed = False  # the open session's updates changed a weight
        self.salts: dict[str, str | None] = {}
        self.flushes = 0
        self.tokenizer_manager = self
        FakeSglang.built.append(self)

    # ---- scheduler state -------------------------------------------------------------------
    def idle(self) -> bool:
        return self.streams == 0 and time.monotonic() >= self.busy_until

    def _reply(self, call: str, ok: bool, message: str) -> tuple[bool, str]:
        self.replies.append((call, (ok, message)))
        return ok, message

    def _wait_streams(self) -> None:
        """The writer side of the model-update lock: wait until no stream runs (not taken while
        generation is paused)."""
        while self.streams and not self.paused:
            self.loop.run_until_complete(asyncio.sleep(0.001))

    # ---- API -------------------------------------------------------------------------------
    def get_server_info(self) -> dict:
        return {"context_length": 256, "internal_states": [{"max_total_num_tokens": 1000}]}

    def abort_request(self, rid: str = "", abort_all: bool = False) -> None:
        if rid in self.live_rids:  # an unknown rid is dropped (tokenizer_manager.py:2246-2253)
            self.aborted.add(rid)
            self.ever_aborted.add(rid)

    async def flush_cache(self, timeout_s: float | None = None) -> FlushCacheReqOutput:
        deadline = time.monotonic() + (timeout_s or 0.0)
        while not self.idle():
            if time.monotonic() >= deadline:
                return FlushCacheReqOutput(False, "Timed out waiting for idle state.")
            await asyncio.sleep(0.001)
        self.flushes += 1
        return FlushCacheReqOutput(True)

    async def pause_generation(self, obj: PauseGenerationReqInput) -> None:
        assert obj.mode == "in_place", obj.mode  # the mode the adapter uses
        self.paused = True

    async def continue_generation(self, obj: ContinueGenerationReqInput) -> None:
        self.paused = False

    async def async_generate(
        self,
        input_ids=None,
        sampling_params=None,
        return_logprob=False,
        stream=False,
        rid=None,
        *,
        cache_salt=None,
    ):
        while self.paused:  # a new request waits for the continue
            await asyncio.sleep(0.001)
        self.streams += 1
        self.live_rids.add(rid)
        self.salts[rid] = cache_salt

        async def gen():
            pairs = []
            try:
                for i in range(sampling_params["max_new_tokens"]):
                    await asyncio.sleep(0.001)
                    while self.paused:  # in place: the stream stands still, its K/V kept
                        await asyncio.sleep(0.001)
                    if rid in self.aborted:
                        yield {
                            "meta_info": {
                                "completion_tokens": i,
                                "output_token_logprobs": pairs,
                                "finish_reason": {"type": "abort"},
                            }
                        }
                        return
                    token = (len(input_ids) + i + EPOCH_SHIFT * self.epoch) % 50
                    pairs = pairs + [(-float(i), token, None)]
                    done = i + 1 == sampling_params["max_new_tokens"]
                    if done:  # finished in the scheduler: forgotten, then the last chunk arrives
                        self.live_rids.discard(rid)
                        await asyncio.sleep(self.delivery_s)
                    yield {
                        "meta_info": {
                            "completion_tokens": i + 1,
                            "output_token_logprobs": pairs,
                            "finish_reason": {"type": "length"} if done else None,
                        }
                    }
            finally:
                self.streams -= 1
                self.live_rids.discard(rid)
                self.aborted.discard(rid)
                self.busy_until = time.monotonic() + INFLIGHT_S

        return gen()

    def begin_weight_update(self, selector: str = "all") -> tuple[bool, str]:
        self._wait_streams()
        if self.session:
            return self._reply("begin", False, SESSION_OPEN)
        self.session, self.changed = True, False
        return self._reply("begin", True, "Success")

    def end_weight_update(self) -> tuple[bool, str]:
        self._wait_streams()
        if not self.session:
            return self._reply("end", False, NO_SESSION)
        self.session = False
        self.epoch += self.changed
        return self._reply("end", True, "Success")

    def update_weights_from_tensor(
        self, named_tensors, load_format=None, flush_cache=True
    ) -> tuple[bool, str]:
        self._wait_streams()
        if not self.session:
            return self._reply("update", False, UPDATE_OUTSIDE)
        if load_format is not None and load_format not in (
            self.kwargs.get("custom_weight_loader") or []
        ):
            raise NotImplementedError(f"Unknown load_format={load_format}")
        self.load_formats.append(load_format)
        self.updates.append(([n for n, _ in named_tensors], flush_cache))
        for n, t in named_tensors:
            self.changed = (
                self.changed or n not in self.weights or not torch.equal(self.weights[n], t)
            )
            self.weights[n] = t.clone()
        if flush_cache and not self.idle():
            return self._reply("update", False, FLUSH_REFUSED)
        return self._reply("update", True, "Success")

    def get_weights_by_name(self, name: str, truncate_size: int = 100) -> Any:
        if not self.has_weights_by_name:
            return None
        return self.weights[name][:truncate_size].tolist()

    def release_memory_occupation(self, tags=None) -> None:
        assert self.idle(), "release_memory_occupation should be called only when server is idle."
        self.calls.append("release")

    def resume_memory_occupation(self, tags=None) -> None:
        self.calls.append("resume")

    def shutdown(self) -> None:
        self.calls.append("shutdown")
