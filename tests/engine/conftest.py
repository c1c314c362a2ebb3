"""Tiny random models for the engine tests, built on the fly."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pivot.model import CausalLM, ModelArgs, save_pretrained

EOS = 1


def tiny_args(family: str = "qwen2", vocab: int = 96, tie: bool = False) -> ModelArgs:
    moe = (
        {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}
        if family == "qwen3_moe"
        else {}
    )
    return ModelArgs(
        family=family,
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        tie_word_embeddings=tie,
        eos_token_id=EOS,
        **moe,
    )


def make_model(path: Path, family: str = "qwen2", seed: int = 0, tie: bool = False) -> CausalLM:
    torch.manual_seed(seed)
    model = CausalLM(tiny_args(family, tie=tie)).eval()
    with torch.no_grad():  # sharper logits than default init, so greedy has clear winners
        model.lm_head.weight.mul_(4.0)
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    save_pretrained(model, path)
    return model


@pytest.fixture(scope="session")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny_qwen2")
    make_model(path)
    return path


def prompts(n: int, seed: int = 0, lo: int = 3, hi: int = 20) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(lo, hi, (n,), generator=g).tolist()
    return [torch.randint(2, 96, (k,), generator=g).tolist() for k in lens]


def run_all(engine, max_steps: int = 10_000) -> dict:
    """Step until idle; {id: Output}."""
    outs = {}
    for _ in range(max_steps):
        if not engine.has_work():
            return outs
        for o in engine.step():
            outs[o.id] = o
    raise AssertionError("engine did not finish")
