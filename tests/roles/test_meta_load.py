"""Meta-device construction plus sliced loading equals loading everything: for an inference
replica of TP=2 (its slices from safetensors boxes) and for the FSDP trainer over 2 ranks. The
reference is the whole checkpoint loaded at once (`load_state_dict`, `from_pretrained`)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from pivot.config import EngineConfig, TrainConfig
from pivot.engine import Engine
from pivot.gps.layout import Place, parallel_layout
from pivot.gps.torch_specs import specs_from_checkpoint
from pivot.model import CausalLM, ModelArgs, from_pretrained, load_state_dict, save_pretrained
from pivot.model.meta_init import materialize, params_on_meta
from pivot.model.sliced_load import read_boxes
from pivot.roles.trainer import Trainer
from tests.roles.trainer_harness import spawn


def _checkpoint(path: Path, tie: bool) -> Path:
    """Random weights; heads, KV heads, vocab and intermediate all divide over 2 TP ranks."""
    args = ModelArgs(
        family="qwen2",
        vocab_size=38,
        hidden_size=16,
        intermediate_size=24,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=8,
        tie_word_embeddings=tie,
    )
    torch.manual_seed(3)
    model = CausalLM(args)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    save_pretrained(model, path)
    return path


def test_meta_model_with_whole_boxes_equals_loaded(tmp_path: Path) -> None:
    path = _checkpoint(tmp_path / "m", tie=True)
    with params_on_meta():
        model = CausalLM(ModelArgs.load(path))
    assert all(p.is_meta for p in model.parameters()) and not model.model.rotary.inv_freq.is_meta
    materialize(model, "cpu")
    specs = specs_from_checkpoint(path)
    model.load_state_dict(
        read_boxes(path, {s.name: tuple((0, n) for n in s.shape) for s in specs}), strict=False
    )
    assert model.lm_head.weight is model.model.embed_tokens.weight
    ids = torch.randint(0, 38, (2, 7))
    torch.testing.assert_close(model(ids), from_pretrained(path)(ids), atol=0, rtol=0)


def _ranks(rank: int, world: int, group: dist.ProcessGroup, path: Path) -> None:
    full = load_state_dict(path)
    # inference: meta engine under TP=2, each rank loads its TP boxes only
    specs = specs_from_checkpoint(path)
    mine = parallel_layout("policy", specs, [0, 1], [0, 0], tp=2).held_by(Place(0, rank))
    slices = read_boxes(path, {name: piece.box for name, _, piece in mine})
    assert sum(t.numel() for t in slices.values()) < sum(t.numel() for t in full.values())
    with params_on_meta():
        model = CausalLM(ModelArgs.load(path))
    engine = Engine(
        model, EngineConfig(kv_capacity_tokens=64, block_size=16), tp_group=group, device="cpu"
    )
    engine.load_weights(slices, version=1)
    got = engine.named_parameters_hf()
    assert set(got) == set(full)
    for name, t in full.items():
        assert torch.equal(got[name], t), name
    # training: FSDP over 2 ranks, each reads its dim-0 rows
    trainer = Trainer.from_pretrained(path, group, TrainConfig(), device="cpu")
    for name, p in trainer.params.items():
        assert torch.equal(p.full_tensor(), full[name]), name


@pytest.mark.slow
def test_meta_engine_tp2_and_fsdp_trainer_equal_full_load(tmp_path: Path) -> None:
    spawn(_ranks, 2, _checkpoint(tmp_path / "m", tie=False))
