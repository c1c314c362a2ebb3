"""Spawn helpers for multi-rank CPU tests (gloo), and a tiny random policy."""

from __future__ import annotations

import gc
import os
import socket
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from pivot.model import CausalLM, ModelArgs
from tests import forked_ranks


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _entry(
    rank: int, world: int, port: int, backend: str, fn: Callable[..., None], args: tuple[Any, ...]
) -> None:
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    torch.set_num_threads(1)  # two ranks on two cores; also keeps CPU math deterministic
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, rank=rank, world_size=world)
    try:
        fn(rank, world, dist.new_group(list(range(world))), *args)
    finally:
        # the test's objects (a trainer's DTensors in reference cycles) must free their gloo
        # work before the group goes: left to interpreter shutdown, gloo's worker thread frees a
        # finished collective there and aborts ("terminate called without an active exception",
        # seen in CI here as in tests/model/test_hub_layouts_tp.py, commit 402d519)
        gc.collect()
        dist.destroy_process_group()
        gc.collect()


def spawn(fn: Callable[..., None], world: int, *args: Any, backend: str = "gloo") -> None:
    """Run `fn(rank, world, group, *args)` on `world` ranks; a rank's exception fails the test."""
    forked_ranks.spawn(_entry, (world, free_port(), backend, fn, args), world)


def tiny_model(seed: int = 0, vocab: int = 37, tie: bool = True, family: str = "qwen2") -> CausalLM:
    # qwen3_moe: layer 0 routes top-2 of 4 experts, layer 1 is dense
    moe = (
        {
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 8,
            "norm_topk_prob": True,
            "mlp_only_layers": [1],
        }
        if family == "qwen3_moe"
        else {}
    )
    args = ModelArgs(
        family=family,
        vocab_size=vocab,
        hidden_size=16,
        intermediate_size=24,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
        tie_word_embeddings=tie,
        **moe,
    )
    torch.manual_seed(seed)
    model = CausalLM(args)
    with torch.no_grad():
        for p in model.parameters():  # small random init so the loss is not flat
            p.normal_(0.0, 0.2)
    return model
