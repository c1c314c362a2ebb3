"""The engine protocol over an in-process `sglang.Engine` (GPU only).

NEVER RUN ON A GPU: the tests drive this adapter through a fake `sglang` module
(tests/engine/fake_sglang.py) that models sglang 0.5.23's session, refusals and idle rules, and
tests/engine/test_sglang_contract.py checks every call below against that wheel's own source
(read with `ast`, not imported). sglang 0.5.23's Python API as used here (sglang/srt/entrypoints/
engine.py): `Engine(**ServerArgs)`, `async_generate(input_ids=, sampling_params=,
return_logprob=True, stream=True, rid=)`, `tokenizer_manager.abort_request(rid=)`,
`begin_weight_update()` / `update_weights_from_tensor(named_tensors, flush_cache=)` /
`end_weight_update()` (each answers `(success, message)`), `tokenizer_manager.flush_cache(
timeout_s=)` (a `FlushCacheReqOutput`), `release_memory_occupation()` /
`resume_memory_occupation()`, `get_server_info()`, `get_weights_by_name(name, truncate_size)`,
`shutdown()`. sglang is imported only when an engine is built.

Process model: one sglang `Engine` per replica, built by the replica's leader rank with
`tp_size` = the replica's devices and `base_gpu_id` = the leader's local device (a slot's
devices are consecutive on one host); sglang starts its own TP scheduler processes on those
devices, so the slot's other ranks stay parked (see `pivot.roles.inference`).
Mapping to the protocol:
  add / step        one streaming `async_generate` task per request, on the engine's event
                    loop; `step()` runs the loop for `poll_s` and returns what finished
  abort             `tokenizer_manager.abort_request(rid)`; tokens streamed so far are kept, so
                    the partial resumes elsewhere like the embedded engine's
  load_weights      full HF-named tensors (sglang shards them under its own TP), validated
                    against the checkpoint's tensor list, pushed (`pivot.engine.backends.sglang_weights`)
                    in buckets of `bucket_bytes` through `staging_device` inside ONE
                    weight-update session (0.5.23 refuses `update_weights_from_tensor` outside
                    `begin_weight_update()` .. `end_weight_update()`, weight_updater.py:232-239).
                    With requests running, generation is paused in place around the session
                    (no abort, no re-prefill: they keep their K/V and continue with the new
                    weights), no bucket flushes the prefix cache (that would fail the update,
                    weight_updater.py:120-133), and the cache is flushed the first time the
                    engine is idle after. Each bucket loads only once the batch the pause left
                    running has finished (`sglang_weights.load_after_inflight`): no token is
                    made by a mix of old and new layers. Every request carries `cache_salt` =
                    its weights version (engine.py:600), so no prefix of old weights is reused
                    meanwhile
  release / resume  wait until the scheduler is idle (`flush_cache(timeout_s=)`), then
                    `release_memory_occupation` (it asserts a fully idle scheduler, including
                    the overlap scheduler's in-flight batch: weight_updater.py:337-341,
                    scheduler.py:5337-5351) / `resume_memory_occupation` (needs
                    `enable_memory_saver`): weights and KV cache leave the devices, the
                    engine's processes, CUDA contexts and NCCL groups stay
  KV usage          `max_total_tokens` is the config's `kv_capacity_tokens`, so the planner and
                    sglang agree on a replica's capacity
The served model is described by its checkpoint (safetensors headers), never by Pivot's own
`ModelArgs`: sglang serves families (MoE, hybrid) Pivot's engine may not. The engine is built
with `load_format="dummy"`: its weights always come from the GPS Read that follows.
A resumed request is re-sent as prompt + generated tokens with the remaining budget, so greedy
resumes match exactly but seeded sampling does not. sglang uses a request's `sampling_seed` only
under `enable_deterministic_inference` (sampling_batch_info.py:157-170; otherwise sampling is
not reproducible by seed): pass `enable_deterministic_inference=True` to `from_pretrained` for it.
`named_parameters_hf` (--log.verify-weights) works only where sglang can return whole tensors:
see `WHOLE_WEIGHTS_BY_NAME`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from pivot.engine.backends.live_requests import LiveRequest, LiveRequests
from pivot.engine.backends.sglang_weights import (
    BUCKET_BYTES,
    LOADER,
    WHOLE_WEIGHTS_BY_NAME,
    paused,
    push_weights,
    whole_weights,
)
from pivot.engine.config import EngineConfig
from pivot.engine.model_runner import validate_weights
from pivot.engine.sequence import AbortResult, EngineStats, Output, Request, SamplingParams
from pivot.gps.torch_specs import specs_from_checkpoint
from pivot.model.hf_folder import text_config

__all__ = ["BUCKET_BYTES", "IDLE_TIMEOUT_S", "WHOLE_WEIGHTS_BY_NAME", "SglangEngine"]

IDLE_TIMEOUT_S = 60.0
"""Longest wait for sglang's scheduler to go idle after aborts (release, weight update)."""
SGLANG_PROCESS_ENV = (
    "NCCL_CUMEM_ENABLE",
    "NCCL_MNNVL_ENABLE",
    "NCCL_NVLS_ENABLE",
    "NCCL_GRAPH_MIXING_SUPPORT",
    "CUDA_DEVICE_MAX_CONNECTIONS",
)
"""Variables `sglang.Engine` sets in the process that builds it, for the processes it starts
(entrypoints/engine.py:1884-1921). They are restored once it is built: the leader's own NCCL
groups (created lazily, possibly after the engine) and CUDA keep the job's settings."""

log = logging.getLogger(__name__)


@dataclass
class _Stream:
    """sglang's side of a request (its `LiveRequest.handle`): the task reading the stream of its
    tokens, how that stream ended, and whether Pivot aborted it."""

    task: asyncio.Task | None = None
    finish_reason: str | None = None
    aborted: bool = False


class SglangEngine:
    def __init__(
        self,
        engine: Any,
        config: EngineConfig,
        full_shapes: dict[str, tuple[int, ...]],
        tokenizer: Any = None,
        poll_s: float = 0.005,
        staging_device: str = "cpu",
        bucket_bytes: int = BUCKET_BYTES,
    ) -> None:
        """`full_shapes`: HF name -> shape of every tensor a weight update must bring (the checkpoint's)."""
        self.requests: LiveRequests[_Stream] = LiveRequests()
        self.engine, self.config, self.tokenizer, self.poll_s = engine, config, tokenizer, poll_s
        self.full_shapes, self.staging_device, self.bucket_bytes = (
            full_shapes,
            staging_device,
            bucket_bytes,
        )
        self.loop: asyncio.AbstractEventLoop = (
            getattr(engine, "loop", None) or asyncio.get_event_loop()
        )
        self._stale_prefixes = False  # the prefix cache holds K/V of weights since replaced
        # from_pretrained fills these two from the checkpoint
        self.tp_size = 1
        self.architectures: tuple[str, ...] = ()
        self.vocab_size = 0  # from_pretrained: the model's (the profiler draws prompts below it)
        info = self._server_info()
        kv_total = int(info.get("max_total_num_tokens", config.kv_capacity_tokens))
        self.requests.kv_total = kv_total
        self.requests.max_len = int(
            info.get("context_length") or info.get("max_req_input_len") or kv_total
        )

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        config: EngineConfig,
        tokenizer: Any = None,
        *,
        tp_size: int = 1,
        base_gpu_id: int = 0,
        dtype: str = "bfloat16",
        seed: int = 0,
        **server_args: Any,
    ) -> SglangEngine:
        """An sglang engine over devices base_gpu_id .. base_gpu_id + tp_size - 1 of this host,
        serving the model in folder `path` (random weights until the first `load_weights`)."""
        import sglang  # guarded: only the sglang backend needs it

        kwargs = dict(
            model_path=str(path),
            tp_size=tp_size,
            base_gpu_id=base_gpu_id,
            dtype=dtype,
            random_seed=seed,
            skip_tokenizer_init=True,
            enable_memory_saver=True,
            load_format="dummy",
            max_running_requests=config.max_running_seqs,
            chunked_prefill_size=config.max_prefill_tokens,
            max_total_tokens=config.kv_capacity_tokens,
            # every weight update loads through it: `sglang_weights.load_after_inflight`
            custom_weight_loader=[LOADER, *(server_args.pop("custom_weight_loader", None) or [])],
        )
        with _env_restored(SGLANG_PROCESS_ENV):
            engine = sglang.Engine(**{**kwargs, **server_args})
        shapes = {s.name: tuple(s.shape) for s in specs_from_checkpoint(path)}
        staging = f"cuda:{base_gpu_id}" if torch.cuda.is_available() else "cpu"
        out = cls(engine, config, shapes, tokenizer, staging_device=staging)
        out.tp_size = tp_size
        out.architectures = tuple(_architectures(Path(path)))
        out.vocab_size = int(text_config(path).get("vocab_size", 0))
        return out

    def _server_info(self) -> dict[str, Any]:
        info = dict(self.engine.get_server_info())
        for state in info.get("internal_states") or []:  # scheduler-reported values win
            info.update(
                {k: v for k, v in state.items() if k not in info or k == "max_total_num_tokens"}
            )
        return info

    # ---- answered from the requests alone -------------------------------------------------
    @property
    def max_len(self) -> int:
        return self.requests.max_len

    @property
    def weights_version(self) -> int:
        return self.requests.version

    @property
    def graphs_capture_s(self) -> float:
        return 0.0  # sglang captures its own graphs, as part of its start

    def has_work(self) -> bool:
        return self.requests.has_work()

    def progress(self) -> dict[int, int]:
        return self.requests.progress()

    def can_admit(self, num_tokens: int) -> bool:
        return self.requests.can_admit(num_tokens)

    def stats(self) -> EngineStats:
        return self.requests.stats()

    def salvage(self) -> list[Request]:
        return self.requests.salvage()

    # ---- requests --------------------------------------------------------------------------
    def add_all(self, requests: list[Request]) -> None:
        for request in requests:
            self.add(request)

    def add(self, request: Request) -> None:
        self.requests.check_new(request, min(self.max_len, self.requests.kv_total))
        stream = _Stream()
        live = LiveRequest(request, stream, self.requests.version)
        stream.task = self.loop.create_task(self._generate(live))
        self.requests.live[request.id] = live

    def _sampling(self, p: SamplingParams, done: int) -> dict[str, Any]:
        out: dict[str, Any] = {
            "temperature": p.temperature,
            "top_p": p.top_p,
            "top_k": p.top_k if p.top_k > 0 else -1,
            "max_new_tokens": p.max_new_tokens - done,
            "stop": list(p.stop),
            "ignore_eos": p.ignore_eos,
        }
        if p.seed is not None:
            out["sampling_seed"] = p.seed + done
        return out

    async def _generate(self, live: LiveRequest[_Stream]) -> None:
        req = live.request
        base = len(live.output_ids)
        stream = await self.engine.async_generate(
            input_ids=list(req.prompt_ids) + list(req.output_ids),
            sampling_params=self._sampling(req.params, base),
            return_logprob=True,
            stream=True,
            rid=str(req.id),
            cache_salt=f"v{live.added_version}",
        )
        async for chunk in stream:
            meta = chunk.get("meta_info", {})
            # works for cumulative and incremental streaming: keep the last `new` entries
            total = int(meta.get("completion_tokens", 0))
            new = total - (len(live.output_ids) - base)
            pairs = meta.get("output_token_logprobs") or []
            for lp, tok, *_ in pairs[len(pairs) - new :] if new > 0 else []:
                live.output_ids.append(int(tok))
                live.logprobs.append(float(lp))
                self.requests.tokens_generated += 1
            reason = meta.get("finish_reason")
            if reason:
                kind = reason.get("type") if isinstance(reason, dict) else str(reason)
                live.handle.finish_reason = (
                    "length" if kind == "length" else ("abort" if kind == "abort" else "stop")
                )

    def step(self) -> list[Output]:
        t0 = time.perf_counter()
        running = self.requests.live
        if running:
            self.loop.run_until_complete(asyncio.sleep(self.poll_s))
        outputs = []
        for rid, live in list(running.items()):
            stream = live.handle
            if stream.task is not None and stream.task.done() and not stream.aborted:
                stream.task.result()  # surface errors
                del running[rid]
                versions = live.so_far().versions
                outputs.append(
                    Output(
                        id=rid,
                        prompt_ids=list(live.request.prompt_ids),
                        output_ids=live.output_ids,
                        output_logprobs=live.logprobs,
                        finish_reason=stream.finish_reason or "stop",
                        weights_version=versions.oldest(self.requests.version),
                        versions=versions,
                    )
                )
        if self._stale_prefixes and not running:
            self._wait_idle("flush the prefix cache")  # it flushes once idle (flush_wrapper.py)
            self._stale_prefixes = False
        self.requests.last_latency = time.perf_counter() - t0
        return outputs

    def abort(self, ids: Iterable[int]) -> AbortResult:
        partials, unknown = [], []
        running = self.requests.live
        for rid in ids:
            live = running.get(rid)
            if live is None or live.handle.aborted:
                unknown.append(rid)
                continue
            live.handle.aborted = True
            self.engine.tokenizer_manager.abort_request(rid=str(rid))
            if live.handle.task is not None:
                self.loop.run_until_complete(asyncio.wait([live.handle.task], timeout=5.0))
            del running[rid]  # only now: a scheduler that fails above has it salvaged
            partials.append(live.so_far())
        if unknown:
            log.warning("abort: unknown request ids %s ignored", unknown)
        return AbortResult(partials, unknown)

    # ---- weights and memory ----------------------------------------------------------------
    def load_weights(
        self, named_tensors: dict[str, Any] | Iterable[tuple[str, Any]], version: int
    ) -> None:
        """Full HF-named tensors (every one the checkpoint has), pushed bucket by bucket inside one
        weight-update session. Requests still running are paused in place around it and continue
        with the new weights; their tokens from the update's end on are labelled `version` (the
        batch in flight at the pause may add one token per request after that mark, made wholly
        by the old weights: the load waits for it, `sglang_weights.load_after_inflight`; never
        before the mark, so a request's oldest version, which the staleness bound uses, is exact)."""
        tensors = validate_weights(named_tensors, self.full_shapes, tied=False)
        running = [
            lv
            for lv in self.requests.live.values()
            if lv.handle.task is not None and not lv.handle.task.done()
        ]
        if not running:  # the last bucket's flush needs the in-flight batch done too
            self._wait_idle("load_weights")
        with paused(self.engine, self.loop) if running else contextlib.nullcontext():
            push_weights(self.engine, tensors, self.bucket_bytes, self.staging_device, not running)
            for lv in running:
                lv.mark(version)
        self.requests.version = version
        self._stale_prefixes = self._stale_prefixes or bool(running)

    def _wait_idle(self, what: str) -> None:
        """Block until sglang's scheduler has nothing running or queued (its in-flight batch
        included), or fail: `flush_cache(timeout_s)` answers once it is idle (flush_wrapper.py:22-61)."""
        out = self.loop.run_until_complete(
            self.engine.tokenizer_manager.flush_cache(timeout_s=IDLE_TIMEOUT_S)
        )
        if not getattr(out, "success", False):
            raise RuntimeError(
                f"{what}: sglang's scheduler did not go idle within {IDLE_TIMEOUT_S:.0f} s: "
                f"{getattr(out, 'message', out)!r}"
            )

    def weight_buffers(self) -> dict[str, torch.Tensor]:
        """None to fill in place: sglang owns its (sharded) parameters; Reads come in fresh."""
        return {}

    def named_parameters_hf(self) -> dict[str, torch.Tensor]:
        """Every weight as sglang holds it now, HF-named and whole (slow, for --log.verify-weights);
        only a `WHOLE_WEIGHTS_BY_NAME` architecture at TP 1 can."""
        return whole_weights(self.engine, self.full_shapes, self.architectures, self.tp_size)

    def release(self) -> AbortResult:
        partials = self.abort(list(self.requests.live))
        self._wait_idle(
            "release"
        )  # release asserts an idle scheduler; aborted streams end before it is
        self.engine.release_memory_occupation()
        return partials

    def resume(self) -> None:
        self.engine.resume_memory_occupation()

    def shutdown(self) -> None:
        self.engine.shutdown()


@contextlib.contextmanager
def _env_restored(names: tuple[str, ...]) -> Iterator[None]:
    """`names` in os.environ as they were before the block (set, changed or removed in it)."""
    saved = {k: os.environ.get(k) for k in names}
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _architectures(path: Path) -> list[str]:
    import json

    try:
        return list(json.loads((path / "config.json").read_text()).get("architectures") or [])
    except (OSError, ValueError):
        return []
