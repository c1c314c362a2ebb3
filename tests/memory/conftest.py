"""A tiny Hugging Face Qwen2 folder built by transformers itself (random weights)."""

from __future__ import annotations

from pathlib import Path

import pytest
import transformers


@pytest.fixture(scope="session")
def qwen2_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """vocab 64, hidden 32, intermediate 64, 2 layers, 4 heads of 8, 2 KV heads, untied."""
    path = tmp_path_factory.mktemp("qwen2_tiny")
    cfg = transformers.Qwen2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=False,
    )
    transformers.Qwen2ForCausalLM(cfg).save_pretrained(path)
    return path
