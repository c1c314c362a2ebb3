"""The random models and greedy generations tools/gpu_checks.py measures with: Qwen2.5-0.5B's
shape and a small one (random weights: nothing is downloaded), random prompts, greedy tokens and
their throughput on an engine, and the small model written to disk as transformers does."""

from __future__ import annotations

import random
import time
from pathlib import Path

import torch

from pivot.engine import Request, SamplingParams

QWEN25_05B = dict(
    family="qwen2",
    vocab_size=151936,
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    head_dim=64,
    max_position_embeddings=32768,
    tie_word_embeddings=True,
)
"""Qwen2.5-0.5B's shape (random weights: nothing is downloaded)."""
SMALL = dict(
    QWEN25_05B,
    vocab_size=4096,
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
)
"""A small random model for the sglang and training checks (written to disk by transformers)."""


def prompts(n: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(2, vocab) for _ in range(length)] for _ in range(n)]


def generate(
    engine: object, batch: list[list[int]], new_tokens: int, first_id: int = 0
) -> tuple[list[list[int]], float]:
    """Greedy generations of `batch` (ids first_id..) and generated tokens per second."""
    for i, p in enumerate(batch):
        engine.add(
            Request(
                first_id + i,
                p,
                SamplingParams(temperature=0, max_new_tokens=new_tokens, ignore_eos=True),
            )
        )
    done: dict[int, list[int]] = {}
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    while engine.has_work():
        for out in engine.step():
            done[out.id] = out.output_ids
    torch.cuda.synchronize()
    tokens = [done[first_id + i] for i in range(len(batch))]
    return tokens, sum(map(len, tokens)) / (time.perf_counter() - t0)


def agreement(a: list[list[int]], b: list[list[int]]) -> float:
    """Fraction of sequences whose greedy tokens are equal."""
    return sum(x == y for x, y in zip(a, b)) / max(len(a), 1)


def small_folder(path: Path) -> Path:
    """A random small qwen2 written by transformers (what sglang's loader expects), sharp logits."""
    import transformers

    torch.manual_seed(0)
    s = SMALL
    model = transformers.Qwen2ForCausalLM(
        transformers.Qwen2Config(
            vocab_size=s["vocab_size"],
            hidden_size=s["hidden_size"],
            intermediate_size=s["intermediate_size"],
            num_hidden_layers=s["num_hidden_layers"],
            num_attention_heads=s["num_attention_heads"],
            num_key_value_heads=s["num_key_value_heads"],
            max_position_embeddings=4096,
            tie_word_embeddings=True,
        )
    )
    with torch.no_grad():  # clear greedy winners, so bf16 kernels of two engines agree
        model.model.embed_tokens.weight.mul_(8.0)
    model.save_pretrained(path)
    return path
