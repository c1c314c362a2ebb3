"""`build_engine`: any backend's engine for one rank of a replica, behind `InferenceEngine`.

The embedded engine runs on every rank of its replica, sharded by Pivot's TP over the replica's
group. A production engine (`Capabilities.owns_processes`: vLLM, sglang) is built by the
replica's leader only, over devices base_gpu_id .. base_gpu_id + tp_size - 1 of this host
(vLLM on CPU: this host's cores), where it starts its own processes and serves with dummy
weights until its first `load_weights`; the other ranks of the replica get a `ParkedEngine`.
The production adapters (`pivot.engine.backends`) import their engine's package, so they are
imported only when one is built.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
import torch.distributed as dist

from pivot.engine.capabilities import capabilities
from pivot.engine.config import EngineConfig
from pivot.engine.engine import Engine
from pivot.engine.kv_transport import KVPlace
from pivot.engine.parked import ParkedEngine
from pivot.engine.protocol import InferenceEngine
from pivot.model import CausalLM, ModelArgs, TextTokenizer
from pivot.model.meta_init import params_on_meta

Weights = Literal["checkpoint", "later", "random"]
"""Where the embedded engine's first weights come from: the folder's checkpoint; a
`load_weights` that follows (parameters on the meta device until the TP slice gives them
storage: only this rank's slices ever exist); random values (decode time does not depend on
them: the throughput profile). A production engine always starts with dummy weights."""


@dataclass(frozen=True)
class KVMigration:
    """Where an engine that `migrates_kv` exports aborted sequences' K/V (`Engine.enable_kv_migration`)."""

    prefix: str
    place: KVPlace | None = None
    nixl_prefix: str = ""


def group_position(group: dist.ProcessGroup | None) -> tuple[int, int]:
    """(this rank's position in the replica's group, the group's size); (0, 1) without a group."""
    if group is None:
        return 0, 1
    return dist.get_rank(group), dist.get_world_size(group)


def build_engine(
    path: str | Path,
    config: EngineConfig,
    *,
    tp_group: dist.ProcessGroup | None = None,
    tp_size: int | None = None,
    base_gpu_id: int | None = None,
    tokenizer: TextTokenizer | None = None,
    dtype: str = "float32",
    attention: str = "sdpa",
    linear: str = "torch",
    device: str = "cpu",
    seed: int = 0,
    weights: Weights = "checkpoint",
    kv: KVMigration | None = None,
) -> InferenceEngine:
    """This rank's engine of a replica serving the model folder `path` with `config.backend`.

    `tp_group`: the replica's group (None: this rank alone); `tp_size`: the replica's devices
    when no group spans them (a production engine started by one rank, e.g. to profile it);
    `base_gpu_id`: the leader's device index on its host (default: `device`'s). `dtype`,
    `attention` and `linear` are `ModelConfig`'s; `seed` seeds sampling for requests without one;
    `kv`: export migrated sequences' K/V, where the backend `migrates_kv`."""
    caps = capabilities(config.backend)
    position, size = group_position(tp_group)
    if caps.owns_processes:
        if position:
            return ParkedEngine(config)  # the leader's engine uses this rank's device
        return _production(
            path,
            config,
            tokenizer,
            tp_size=tp_size or size,
            base_gpu_id=(torch.device(device).index or 0) if base_gpu_id is None else base_gpu_id,
            dtype=dtype,
            device=device,
            seed=seed,
        )
    if weights == "checkpoint":
        engine = Engine.from_pretrained(
            path,
            config,
            tp_group,
            tokenizer,
            dtype=dtype,
            attention=attention,
            device=device,
            seed=seed,
        )
    else:
        args = ModelArgs.load(Path(path))
        with torch.device(device), params_on_meta() if weights == "later" else nullcontext():
            model = CausalLM(args, linear=linear).to(getattr(torch, dtype))
        engine = Engine(
            model,
            config,
            tp_group=tp_group,
            tokenizer=tokenizer,
            attention=attention,
            seed=seed,
            device=device,
        )
    if kv is not None and caps.migrates_kv:
        engine.enable_kv_migration(kv.prefix, kv.place, kv.nixl_prefix)
    return engine


def _production(
    path: str | Path,
    config: EngineConfig,
    tokenizer: Any,
    *,
    tp_size: int,
    base_gpu_id: int,
    dtype: str,
    device: str,
    seed: int,
) -> InferenceEngine:
    kwargs: dict[str, Any] = dict(tp_size=tp_size, base_gpu_id=base_gpu_id, dtype=dtype, seed=seed)
    if config.backend == "vllm":
        from pivot.engine.backends.vllm_adapter import VllmEngine  # imports vLLM when built

        return VllmEngine.from_pretrained(path, config, tokenizer, device=device, **kwargs)
    if config.backend == "sglang":
        from pivot.engine.backends.sglang_adapter import SglangEngine

        return SglangEngine.from_pretrained(path, config, tokenizer, **kwargs)
    raise ValueError(f"engine.backend={config.backend!r} is not a production engine")
