"""The engine's config section (`--rollout.engine.*`, `--reward.engine.*` in the tree of
`pivot/config.py`, which imports it from here).

Parameter dtype and the attention kernel come from `ModelConfig` (`dtype`, `attention`) and are
passed to `pivot.engine.factory.build_engine` as keyword arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pivot.config_check import check

DEFAULT_BLOCK_SIZE = {"sdpa": 16, "flash": 256}
"""KV-cache block size per attention kernel when `EngineConfig.block_size` is 0."""
FLASH_BLOCK_MULTIPLE = 256
"""flash-attn's paged KV (`block_table`) takes only blocks of a multiple of this many tokens."""
ATTENTIONS = tuple(DEFAULT_BLOCK_SIZE)


@dataclass
class EngineConfig:
    backend: Literal["embedded", "sglang", "vllm"] = "embedded"
    """Inference backend: Pivot's embedded engine (CPU and GPU), sglang (GPU only) or vLLM (GPU;
    CPU with vLLM's CPU build, head_dim >= 32; docs/gpu.md)."""
    kv_capacity_tokens: int = 16384
    """KV-cache capacity of one replica, in tokens."""
    block_size: int = 0
    """Tokens per KV-cache block; 0 = the attention kernel's default (16 for sdpa, 256 for flash,
    whose paged KV needs a multiple of 256)."""
    max_running_seqs: int = 32
    """Most sequences decoding at once on one replica."""
    max_prefill_tokens: int = 2048
    """Prefill chunk size in tokens (chunked prefill)."""
    decode_graphs: Literal["auto", "cuda", "eager", "off"] = "auto"
    """Decode steps as replayed graphs: 'auto' captures CUDA graphs on a GPU and runs eagerly on
    CPU; 'off' never captures (for debugging; vLLM's `enforce_eager`); 'eager' runs the graph
    path (buckets, padding, static buffers) without capturing, which is how CPU tests check it."""
    max_decode_graphs: int = 64
    """Most decode graphs one engine rank captures (batch buckets x context-width buckets; with
    SDPA the width ladder is thinned on a log scale to fit, with flash-attn one width serves
    all). All are captured when the replica starts or shifts up, and their memory is in the
    memory plan (`--dry-run`): pivot/engine/decode_graphs.py."""

    def __post_init__(self) -> None:
        for name in (
            "kv_capacity_tokens",
            "max_running_seqs",
            "max_prefill_tokens",
            "max_decode_graphs",
        ):
            check(getattr(self, name) > 0, f"engine.{name}", getattr(self, name), "must be > 0")
        check(
            self.block_size >= 0,
            "engine.block_size",
            self.block_size,
            "must be >= 0 (0 = the kernel's default)",
        )

    def kv_block_size(self, attention: str) -> int:
        """The block size this engine uses with attention kernel `attention`."""
        return self.block_size or DEFAULT_BLOCK_SIZE[attention]
