"""The engine's config section lives in the shared tree (`pivot.config.EngineConfig`).

Fields: backend ("embedded" | "sglang"), kv_capacity_tokens, block_size (0 = the attention
kernel's default, `EngineConfig.kv_block_size`), max_running_seqs, max_prefill_tokens. Parameter
dtype and the attention kernel come from `ModelConfig` (`dtype`, `attention`) and are passed to
`Engine.from_pretrained` as keyword arguments.
"""
from __future__ import annotations

from pivot.config import DEFAULT_BLOCK_SIZE, FLASH_BLOCK_MULTIPLE, EngineConfig

ATTENTIONS = tuple(DEFAULT_BLOCK_SIZE)

__all__ = ["ATTENTIONS", "FLASH_BLOCK_MULTIPLE", "EngineConfig"]
