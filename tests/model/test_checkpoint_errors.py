"""Bad checkpoints fail with errors that name the file and the tensor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import pivot.model as pm
from pivot.model.hf_folder import check_folder, tensor_headers

ARGS = pm.ModelArgs(
    family="qwen2",
    vocab_size=50,
    hidden_size=16,
    intermediate_size=32,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=8,
)


@pytest.fixture
def ckpt(tmp_path: Path) -> Path:
    pm.save_pretrained(pm.CausalLM(ARGS), tmp_path)
    return tmp_path


def test_roundtrip(ckpt: Path) -> None:
    assert pm.from_pretrained(ckpt).args == ARGS


def test_truncated_file(ckpt: Path) -> None:
    data = (ckpt / "model.safetensors").read_bytes()
    (ckpt / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(ValueError, match="model.safetensors.*truncated"):
        pm.from_pretrained(ckpt)


def test_missing_file(ckpt: Path) -> None:
    (ckpt / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        pm.from_pretrained(ckpt)


def test_wrong_shape_and_missing_tensor(ckpt: Path) -> None:
    state = load_file(str(ckpt / "model.safetensors"))
    state["model.layers.0.mlp.up_proj.weight"] = torch.zeros(3, 3)
    save_file(state, str(ckpt / "model.safetensors"))
    with pytest.raises(ValueError, match=r"model.layers.0.mlp.up_proj.weight.*shape \(3, 3\)"):
        pm.from_pretrained(ckpt)
    del state["model.layers.0.mlp.up_proj.weight"]
    save_file(state, str(ckpt / "model.safetensors"))
    with pytest.raises(ValueError, match="up_proj.weight.*missing"):
        pm.from_pretrained(ckpt)


@pytest.mark.parametrize(
    ("model_type", "match"),
    [("gpt2", "unsupported architecture"), ("mixtral", "mixture-of-experts")],
)
def test_unsupported_architecture(ckpt: Path, model_type: str, match: str) -> None:
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["model_type"] = model_type
    (ckpt / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=f"config.json.*{match}"):
        pm.from_pretrained(ckpt)


def _one_line(excinfo: pytest.ExceptionInfo) -> str:
    text = str(excinfo.value)
    assert "\n" not in text, text
    return text


def test_missing_shard_named_by_every_reader(tmp_path: Path) -> None:
    pm.save_pretrained(pm.CausalLM(ARGS), tmp_path, max_shard_bytes=4096)
    weight_map = json.loads((tmp_path / "model.safetensors.index.json").read_text())["weight_map"]
    shard = sorted(set(weight_map.values()))[1]
    (tmp_path / shard).unlink()
    for read in (pm.from_pretrained, check_folder, tensor_headers):
        with pytest.raises(FileNotFoundError) as e:
            read(tmp_path)
        assert (
            _one_line(e)
            == f"{tmp_path / shard}: listed in model.safetensors.index.json but missing"
        )


def test_check_folder_reads_headers_against_config(ckpt: Path) -> None:
    check_folder(ckpt)
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg["intermediate_size"] = 48  # the weights were saved with 32
    (ckpt / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError) as e:
        check_folder(ckpt)
    assert (
        _one_line(e)
        == f"{ckpt}: tensor 'model.layers.0.mlp.gate_proj.weight' has shape (32, 16), config.json implies (48, 16)"
    )


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"num_experts_per_tok": 5}, "num_experts_per_tok=5 must be in 1..num_experts=4"),
        ({"moe_intermediate_size": 0}, "moe_intermediate_size=0"),
        (
            {"partial_rotary_factor": 0.1},
            "partial_rotary_factor=0.1 must give an even rotary width",
        ),
        (
            {"rope_parameters": {"rope_type": "yarn", "factor": 4.0}},
            "rope_type='yarn' is not supported",
        ),
        ({"hidden_act": "gelu"}, "hidden_act='gelu'"),
    ],
)
def test_bad_hyper_parameters_name_the_field(ckpt: Path, change: dict, match: str) -> None:
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg.update(
        {
            "model_type": "qwen3_moe",
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 8,
            **change,
        }
    )
    (ckpt / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match=match):
        pm.ModelArgs.load(ckpt)
