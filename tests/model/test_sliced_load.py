"""Sliced safetensors reads: boxes of a sharded (indexed) checkpoint equal slices of the whole."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pivot.model import CausalLM, ModelArgs, load_state_dict, save_pretrained
from pivot.model.sliced_load import INDEX, read_boxes


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("sharded")
    args = ModelArgs(
        family="qwen3",
        vocab_size=40,
        hidden_size=16,
        intermediate_size=24,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
    )
    torch.manual_seed(0)
    save_pretrained(CausalLM(args), path, max_shard_bytes=8192)
    assert (path / INDEX).is_file()
    return path


def test_boxes_equal_slices_of_the_whole(sharded: Path) -> None:
    full = load_state_dict(sharded)
    boxes = {
        "model.embed_tokens.weight": ((10, 20), (0, 16)),
        "model.layers.1.mlp.down_proj.weight": ((0, 16), (12, 24)),
        "model.norm.weight": ((0, 16),),
    }
    got = read_boxes(sharded, boxes, dtype=torch.bfloat16)
    assert torch.equal(
        got["model.embed_tokens.weight"], full["model.embed_tokens.weight"][10:20].bfloat16()
    )
    assert torch.equal(
        got["model.layers.1.mlp.down_proj.weight"],
        full["model.layers.1.mlp.down_proj.weight"][:, 12:24].bfloat16(),
    )
    assert torch.equal(got["model.norm.weight"], full["model.norm.weight"].bfloat16())


def test_errors_name_the_tensor(sharded: Path) -> None:
    with pytest.raises(ValueError, match="'model.nope.weight' is not listed"):
        read_boxes(sharded, {"model.nope.weight": ((0, 1),)})
    with pytest.raises(ValueError, match=r"'model.norm.weight' of shape \(16,\) has no box"):
        read_boxes(sharded, {"model.norm.weight": ((0, 17),)})
