"""The production engines behind Pivot's engine protocol: which adapter serves a backend
(`EngineConfig.backend` "vllm" or "sglang"), built over a replica's devices. Each engine starts
its own processes on devices base_gpu_id .. base_gpu_id + tp_size - 1 of this host (vLLM on CPU:
this host's cores) and serves with dummy weights until its first `load_weights`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pivot.engine.config import EngineConfig


def production_engine(
    path: str | Path,
    config: EngineConfig,
    tokenizer: Any = None,
    *,
    tp_size: int,
    base_gpu_id: int,
    dtype: str,
    device: str,
    seed: int = 0,
) -> Any:
    """The `config.backend` engine's adapter serving the model folder `path`."""
    kwargs: dict[str, Any] = dict(tp_size=tp_size, base_gpu_id=base_gpu_id, dtype=dtype, seed=seed)
    if config.backend == "vllm":
        from pivot.engine.vllm_adapter import VllmEngine  # guarded: imports vLLM when built

        return VllmEngine.from_pretrained(path, config, tokenizer, device=device, **kwargs)
    if config.backend == "sglang":
        from pivot.engine.sglang_adapter import SglangEngine

        return SglangEngine.from_pretrained(path, config, tokenizer, **kwargs)
    raise ValueError(f"engine.backend={config.backend!r} is not a production engine")
