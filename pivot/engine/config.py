"""The engine's config section (`--rollout.engine.*`, `--reward.engine.*` in the tree of
`pivot/config.py`, which imports it from here).

Parameter dtype and the attention kernel come from `ModelConfig` (`dtype`, `attention`) and are
passed to `pivot.engine.factory.build_engine` as keyword arguments.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pivot.bad_input import check

DEFAULT_BLOCK_SIZE = {"flex": 64, "gather": 16, "flash": 256}
"""KV-cache block size per paged attention kernel when `EngineConfig.block_size` is 0. Flex's is
its block mask's key block, which Triton's flex forward kernel needs to be a multiple of its key
tile (64 in torch 2.13's default configs for head size 128: torch/_inductor/kernel/flex/
flex_attention.py, the "Q and KV block size must be divisible by BLOCK_M and BLOCK_N" check)."""
FLASH_BLOCK_MULTIPLE = 256
"""flash-attn's paged KV (`block_table`) takes only blocks of a multiple of this many tokens."""
ATTENTIONS = ("sdpa", "flash")
"""The model's whole-sequence kernels (`ModelConfig.attention`)."""


@dataclass
class EngineConfig:
    backend: Literal["embedded", "sglang", "vllm"] = "embedded"
    """Inference backend: Pivot's embedded engine (CPU and GPU), sglang (GPU only) or vLLM (GPU;
    CPU with vLLM's CPU build, head_dim >= 32; docs/gpu.md)."""
    kv_capacity_tokens: int = 16384
    """KV-cache capacity of one replica, in tokens."""
    block_size: int = 0
    """Tokens per KV-cache block; 0 = the paged kernel's default (64 for flex, 16 for gather,
    256 for flash, whose paged KV needs a multiple of 256)."""
    max_running_seqs: int = 32
    """Most sequences decoding at once on one replica."""
    max_prefill_tokens: int = 2048
    """Prefill chunk size in tokens (chunked prefill)."""
    attention: Literal["auto", "flex", "flash", "gather"] = "auto"
    """Paged attention kernel (pivot/engine/attention.py): 'flex' reads each sequence's K/V in
    place with torch's FlexAttention (CPU and CUDA); 'flash' is flash-attn's paged kernel (CUDA,
    installed from source); 'gather' copies K/V out of the cache into dense SDPA inputs every
    layer (the reference the tests compare against; slow by construction); 'auto' = 'flash'
    when `--model.attention flash`, else 'flex' on a GPU and 'gather' on CPU, where compiling
    flex's C++ kernel costs each rank seconds at start-up that a tiny model never earns back."""
    decode_graphs: Literal["auto", "cuda", "eager", "off"] = "auto"
    """Decode steps as replayed graphs: 'auto' captures CUDA graphs on a GPU and runs eagerly on
    CPU; 'off' never captures (for debugging; vLLM's `enforce_eager`); 'eager' runs the graph
    path (buckets, padding, static buffers) without capturing, which is how CPU tests check it."""
    max_seq_len: int = 0
    """The longest sequence (prompt + generated tokens) this role serves, which its widest decode
    graph covers; 0 = the model's max_position_embeddings. A run sets it from the role's own
    limits at start-up (pivot/model/context.py: rollout = max_prompt_tokens + max_new_tokens,
    reward = the judge prompt's bound + reward.max_new_tokens). A longer sequence is still served,
    its decode steps eagerly."""
    max_decode_graphs: int = 64
    """Most decode graphs one engine rank captures (batch buckets x context-width buckets; on the
    gather reference the width ladder is thinned on a log scale to fit, with flex and flash-attn
    one width serves all). A replica shifted up captures each bucket when its first batch of
    that size comes; their memory is in the memory plan (`--dry-run`):
    pivot/engine/decode_graphs.py."""

    def __post_init__(self) -> None:
        for name in (
            "kv_capacity_tokens",
            "max_running_seqs",
            "max_prefill_tokens",
            "max_decode_graphs",
        ):
            check(getattr(self, name) > 0, f"engine.{name}", getattr(self, name), "must be > 0")
        check(
            self.max_seq_len >= 0,
            "engine.max_seq_len",
            self.max_seq_len,
            "must be >= 0 (0 = the model's max_position_embeddings)",
        )
        check(
            self.block_size >= 0,
            "engine.block_size",
            self.block_size,
            "must be >= 0 (0 = the kernel's default)",
        )

    def paged_kernel(self, model_attention: str, on_gpu: bool = True) -> str:
        """The paged kernel this engine runs for a model whose attention is `model_attention`."""
        if self.attention != "auto":
            return self.attention
        if model_attention == "flash":
            return "flash"
        return "flex" if on_gpu else "gather"

    def timing_key(self, model_attention: str, on_gpu: bool) -> str:
        """The settings a decode step's time depends on, resolved for this device: part of the
        throughput profile's cache key (`pivot.sched.profile.ReplicaShape.engine`), so a profile
        measured on one path is never read for another."""
        graphs = self.decode_graphs
        if graphs == "auto":
            graphs = "cuda" if on_gpu else "off"
        kernel = self.paged_kernel(model_attention, on_gpu)
        block = self.kv_block_size(model_attention, on_gpu)
        return (
            f"{self.backend} kernel={kernel} block={block} graphs={graphs}"
            f" max_graphs={self.max_decode_graphs} prefill={self.max_prefill_tokens}"
        )

    def kv_block_size(self, model_attention: str, on_gpu: bool = True) -> int:
        """The block size this engine uses for a model whose attention is `model_attention`."""
        kernel = self.paged_kernel(model_attention, on_gpu)
        return self.block_size or DEFAULT_BLOCK_SIZE[kernel]
