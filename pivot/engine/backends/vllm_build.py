"""How a vLLM engine for one replica starts (`VllmEngine.from_pretrained`): its engine
arguments from Pivot's engine config and the model folder, and the environment its processes
inherit from a torchrun rank."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from pivot.engine.config import EngineConfig
from pivot.model.hf_folder import text_config

# torchrun's variables: vLLM's processes start their own world and must not join the job's
_TORCHRUN_ENV = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
    "ROLE_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT",
    "TORCHELASTIC_MAX_RESTARTS",
)


@contextlib.contextmanager
def _engine_env(cuda_devices: str | None) -> Iterator[None]:
    """The environment vLLM's spawned processes inherit: no torchrun variables, spawn not fork,
    and on CUDA only the replica's devices."""
    saved = dict(os.environ)
    for k in _TORCHRUN_ENV:
        os.environ.pop(k, None)
    os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "spawn"
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "1")
    if cuda_devices is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = cuda_devices
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def eos_ids(path: Path, tokenizer: Any = None) -> frozenset[int]:
    """EOS ids of the model folder (config.json, generation_config.json) and the tokenizer."""
    ids: set[int] = set()
    for name in ("config.json", "generation_config.json"):
        try:
            value = json.loads((path / name).read_text()).get("eos_token_id")
        except (OSError, ValueError):
            continue
        ids.update(value if isinstance(value, list) else [] if value is None else [value])
    if tokenizer is not None:
        ids.update(getattr(tokenizer, "eos_ids", ()))
    return frozenset(int(i) for i in ids)


def kv_bytes_per_token(path: Path, dtype: torch.dtype, tp_size: int = 1) -> int:
    """K and V bytes of one token over every layer on ONE worker of a TP=`tp_size` engine, from
    config.json (text_config for VL): vLLM's `kv_cache_memory_bytes` is per worker, and a worker
    holds max(1, kv_heads // tp) heads (config/model.py:1650-1670)."""
    cfg = text_config(path)
    heads = cfg["num_attention_heads"]
    head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
    kv_heads = max(1, (cfg.get("num_key_value_heads") or heads) // tp_size)
    size = torch.empty((), dtype=dtype).element_size()
    return 2 * cfg["num_hidden_layers"] * kv_heads * head_dim * size


def engine_kwargs(
    path: Path, config: EngineConfig, *, tp_size: int, dtype: str, seed: int, on_cuda: bool
) -> dict[str, Any]:
    """vLLM `EngineArgs` fields of a replica (pure: no vLLM import, so tested without it)."""
    kwargs: dict[str, Any] = dict(
        model=str(path),
        tensor_parallel_size=tp_size,
        distributed_executor_backend="uni" if tp_size == 1 else "mp",
        dtype=dtype,
        seed=seed,
        skip_tokenizer_init=True,
        load_format="dummy",
        # CUDA graphs on GPU unless `decode_graphs` is 'off'; nothing to capture on CPU
        enforce_eager=not on_cuda or config.decode_graphs == "off",
        # level-2 sleep (shift down) needs it on CUDA, where it turns on the cumem allocator;
        # the CPU platform refuses it (config/model.py:655-662)
        enable_sleep_mode=on_cuda,
        enable_prefix_caching=True,
        max_num_seqs=config.max_running_seqs,
        max_num_batched_tokens=max(config.max_prefill_tokens, config.max_running_seqs),
        # -1: vLLM's auto-fit, the model's own length capped at what the KV cache holds once
        # its null block is set aside (v1/core/kv_cache_utils.py:2414-2460, 2627-2632); a
        # fixed min(model, capacity) is refused at start by that one block
        max_model_len=-1,
        kv_cache_memory_bytes=config.kv_capacity_tokens
        * kv_bytes_per_token(path, getattr(torch, dtype), tp_size),
        logprobs_mode="processed_logprobs",
        # a vision-language checkpoint (Qwen3.5) serves text only: vLLM then builds no vision
        # tower and reserves no encoder cache (models/interfaces.py:339-380)
        language_model_only="vision_config" in json.loads((path / "config.json").read_text()),
        worker_extension_cls="pivot.engine.backends.vllm_weights.PivotWorkerExtension",
    )
    if config.block_size:
        kwargs["block_size"] = config.block_size
    return kwargs


def engine_builder(
    path: Path,
    config: EngineConfig,
    *,
    tp_size: int,
    base_gpu_id: int,
    dtype: str,
    seed: int,
    on_cuda: bool,
    **engine_args: Any,
) -> Callable[[], Any]:
    """A function that starts the replica's `LLMEngine` (called again after a CPU release)."""
    from vllm import EngineArgs  # guarded: only the vllm backend needs it
    from vllm.v1.engine.llm_engine import LLMEngine

    fields = engine_kwargs(path, config, tp_size=tp_size, dtype=dtype, seed=seed, on_cuda=on_cuda)
    args = EngineArgs(**{**fields, **engine_args})
    devices = cuda_devices(base_gpu_id, tp_size) if on_cuda else None

    def build() -> Any:
        if on_cuda:  # vLLM refuses to start unless this share of each device is free
            args.gpu_memory_utilization = free_share(base_gpu_id, tp_size)
        with _engine_env(devices):
            return LLMEngine.from_engine_args(args, enable_multiprocessing=True)

    return build


def cuda_devices(base: int, count: int) -> str:
    """CUDA_VISIBLE_DEVICES for devices base .. base + count - 1 of this process's numbering: a
    job started with CUDA_VISIBLE_DEVICES (Slurm sets it) numbers its devices within that list."""
    visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    ids = range(base, base + count)
    if visible and max(ids) >= len(visible):
        raise ValueError(
            f"vllm: devices {base}..{base + count - 1} asked for, but CUDA_VISIBLE_DEVICES "
            f"lists {len(visible)}"
        )
    return ",".join(visible[i].strip() if visible else str(i) for i in ids)


def free_share(base: int, count: int = 1) -> float:
    """The least share free now over devices base .. base + count - 1, less a margin: each of
    vLLM's workers checks at start that free memory on ITS device is at least
    `gpu_memory_utilization` of that device's total (v1/worker/utils.py:761-769, per worker at
    v1/worker/gpu_worker.py:535), though its KV cache is what `kv_cache_memory_bytes` says; 0.9
    (its default) at most. This process's own device is read through CUDA; the replica's other
    devices through NVML, which opens no CUDA context there (`torch.cuda.mem_get_info` would,
    about 0.5 GB each, held by this process for the job's life)."""
    free, total = torch.cuda.mem_get_info(base)
    shares = [free / total]
    if count > 1:
        shares += _nvml_free_shares(cuda_devices(base, count).split(",")[1:])
    return max(0.05, min(0.9, min(shares) - 0.02))


def _nvml_free_shares(devices: list[str]) -> list[float]:
    """free / total of each device, named as CUDA_VISIBLE_DEVICES names it (an index or a UUID),
    taking an index as NVML's, as vLLM does (platforms/cuda.py:751-757, 801-804)."""
    from vllm.third_party import pynvml  # vLLM's own copy (guarded: only vLLM needs it)

    pynvml.nvmlInit()
    try:
        out = []
        for d in devices:
            handle = (
                pynvml.nvmlDeviceGetHandleByIndex(int(d))
                if d.isdigit()
                else pynvml.nvmlDeviceGetHandleByUUID(d)
            )
            info = pynvml.nvmlDeviceGetMemoryInfo(handle)
            out.append(info.free / info.total)
        return out
    finally:
        pynvml.nvmlShutdown()
