"""Engine configuration (kept here until pivot/config.py grows an engine section)."""
from __future__ import annotations

from dataclasses import dataclass

BACKENDS = ("embedded", "sglang")
ATTENTIONS = ("sdpa", "flash")
DTYPES = ("float32", "bfloat16", "float16")


@dataclass
class EngineConfig:
    backend: str = "embedded"
    """Inference backend: `embedded` (pivot.engine) or `sglang` (in-process sglang.Engine)."""
    kv_capacity_tokens: int = 16384
    """KV-cache size in tokens (per replica; rounded down to whole blocks)."""
    block_size: int = 16
    """Tokens per KV-cache block (flash-attn's paged kernels want a multiple of 256)."""
    max_running_seqs: int = 32
    """Most sequences scheduled in one step (the decode batch size)."""
    max_prefill_tokens: int = 2048
    """Prefill-token budget per step; longer prompts are prefilled in chunks."""
    dtype: str = "float32"
    """Parameter and KV-cache dtype: float32 | bfloat16 | float16."""
    attention: str = "sdpa"
    """Attention kernel: `sdpa` (torch, any device) or `flash` (flash-attn, CUDA only)."""
    device: str = "cpu"
    """Device of this rank's shard, e.g. `cpu` or `cuda:0`."""
    seed: int = 0
    """Seed of the generator used by requests that carry no seed of their own."""

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"EngineConfig.backend={self.backend!r} is not one of {BACKENDS}")
        if self.attention not in ATTENTIONS:
            raise ValueError(f"EngineConfig.attention={self.attention!r} is not one of {ATTENTIONS}")
        if self.dtype not in DTYPES:
            raise ValueError(f"EngineConfig.dtype={self.dtype!r} is not one of {DTYPES}")
        for name in ("kv_capacity_tokens", "block_size", "max_running_seqs", "max_prefill_tokens"):
            if getattr(self, name) < 1:
                raise ValueError(f"EngineConfig.{name}={getattr(self, name)!r} must be >= 1")
        if self.kv_capacity_tokens < self.block_size:
            raise ValueError(
                f"EngineConfig.kv_capacity_tokens={self.kv_capacity_tokens} is smaller than one block "
                f"(block_size={self.block_size})"
            )
