"""The paper's models laid out exactly as the hub ships them (`fixtures/hub_layouts.py`, written by
hand from the real checkpoints' facts): Pivot's logits and the engine's greedy tokens equal
transformers' own reading of the same folder; fused and per-expert experts both load; a TP
rank's sliced read of a fused tensor is its slice of each half; the parts Pivot skips are named
once; unsupported RoPE names its field.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
import torch

import pivot.model as pm
from pivot.engine import Engine, EngineConfig, Request, SamplingParams
from pivot.engine.tp import shard_tensor
from pivot.model.hf_folder import check_folder, load_state_dict
from pivot.model.sliced_load import iter_tp_shards, read_boxes
from tests.model.fixtures.hub_layouts import hub_tensors, tiny_config, write_tiny
from tests.model.fixtures.hub_models import MODELS

transformers = pytest.importorskip("transformers")

CLASSES = {
    "qwen2": transformers.Qwen2ForCausalLM,
    "qwen3_moe": transformers.Qwen3MoeForCausalLM,
    "glm4": transformers.Glm4ForCausalLM,
    "qwen3_5_moe": transformers.Qwen3_5MoeForConditionalGeneration,
}
NAMES = ["Qwen2.5-1.5B", "Qwen2.5-7B", "Qwen3-30B-A3B", "GLM-Z1-9B-0414", "Qwen3.5-122B-A10B"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hub")
    return {
        n: write_tiny(n, root / n, seed=k, shards=min(3, MODELS[n]["shards"]))
        for k, n in enumerate(NAMES)
    }


def _hf(path: Path) -> torch.nn.Module:
    family = json.loads((path / "config.json").read_text())["model_type"]
    return CLASSES[family].from_pretrained(path, dtype=torch.float32).eval()


def test_layouts_are_the_hubs(folders: dict[str, Path]) -> None:
    q35 = folders["Qwen3.5-122B-A10B"]
    index = json.loads((q35 / "model.safetensors.index.json").read_text())["weight_map"]
    assert "model.language_model.layers.0.mlp.experts.gate_up_proj" in index
    assert "model.language_model.layers.0.mlp.experts.down_proj" in index
    assert any(n.startswith("mtp.") for n in index) and any(
        n.startswith("model.visual.") for n in index
    )
    assert sorted(set(index.values()))[0] == "model-00001-of-00003.safetensors"
    assert (
        folders["Qwen2.5-1.5B"] / "model.safetensors"
    ).is_file()  # the 1.5B ships one file, tied
    q3 = json.loads((folders["Qwen3-30B-A3B"] / "model.safetensors.index.json").read_text())[
        "weight_map"
    ]
    assert "model.layers.0.mlp.experts.5.down_proj.weight" in q3
    assert all(t.dtype == torch.bfloat16 for t in load_state_dict(q35).values())
    assert (
        pm.ModelArgs.load(q35).fused_experts
        and not pm.ModelArgs.load(folders["Qwen3-30B-A3B"]).fused_experts
    )


@pytest.mark.parametrize("name", NAMES)
def test_logits_match_transformers(name: str, folders: dict[str, Path]) -> None:
    path = folders[name]
    check_folder(path)
    ours, hf = pm.from_pretrained(path).eval(), _hf(path)
    ids = torch.randint(0, 128, (2, 11), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = hf(input_ids=ids).logits
        torch.testing.assert_close(ours(ids), ref, atol=2e-4 * ref.abs().max().item(), rtol=1e-4)


@pytest.mark.parametrize(
    "name", ["Qwen2.5-7B", "Qwen3-30B-A3B", "GLM-Z1-9B-0414", "Qwen3.5-122B-A10B"]
)
def test_engine_greedy_matches_transformers(name: str, folders: dict[str, Path]) -> None:
    path = folders[name]
    hf = _hf(path)
    engine = Engine.from_pretrained(
        path,
        EngineConfig(
            kv_capacity_tokens=512, block_size=4, max_running_seqs=4, max_prefill_tokens=16
        ),
    )
    g = torch.Generator().manual_seed(3)
    prompts = [torch.randint(0, 118, (k,), generator=g).tolist() for k in (5, 9, 14)]
    for i, p in enumerate(prompts):
        engine.add(Request(i, p, SamplingParams(temperature=0, max_new_tokens=8, ignore_eos=True)))
    outs = {}
    while engine.has_work():
        outs.update({o.id: o for o in engine.step()})
    for i, p in enumerate(prompts):
        ids = list(p)
        with (
            torch.no_grad()
        ):  # transformers' forward, argmax token by token (EOS ignored, as requested)
            for _ in range(8):
                ids.append(int(hf(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
        assert outs[i].output_ids == ids[len(p) :], (name, i)


def test_tp_sliced_reads_are_the_ranks_slices(folders: dict[str, Path]) -> None:
    """Each rank reads only its part of a fused tensor: a slice of the gate half and of the up half."""
    path = folders["Qwen3.5-122B-A10B"]
    full = pm.from_pretrained(path, dtype=torch.bfloat16).state_dict()
    args = pm.ModelArgs.load(path)
    shapes = {
        n: tuple(t.shape)
        for n, t in full.items()
        if n != "lm_head.weight" or not args.tie_word_embeddings
    }
    for rank in range(2):
        got = dict(iter_tp_shards(path, shapes, rank, 2))
        for name, t in got.items():
            torch.testing.assert_close(t, shard_tensor(name, full[name], rank, 2), atol=0, rtol=0)
    gate_up = "model.layers.0.mlp.experts.gate_up_proj"
    e, two_i, h = shapes[gate_up]
    i = two_i // 2
    mine = got[gate_up]  # rank 1 of 2
    assert mine.shape == (e, i, h)
    assert torch.equal(mine[:, : i // 2], full[gate_up][:, i // 2 : i]) and torch.equal(
        mine[:, i // 2 :], full[gate_up][:, i + i // 2 :]
    )
    down = read_boxes(path, {"model.layers.0.mlp.experts.down_proj": ((0, e), (0, h), (16, 32))})
    assert torch.equal(
        down["model.layers.0.mlp.experts.down_proj"],
        full["model.layers.0.mlp.experts.down_proj"][:, :, 16:],
    )


def test_skipped_parts_named_once(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = write_tiny("Qwen3.5-122B-A10B", tmp_path / "q35")
    with caplog.at_level(logging.INFO, logger="pivot.model.hf_folder"):
        check_folder(path)
        pm.from_pretrained(path)
    lines = [r.getMessage() for r in caplog.records if "not loading" in r.getMessage()]
    assert len(lines) == 1 and "model.visual.*" in lines[0] and "mtp.*" in lines[0]
    assert not any(n.startswith(("mtp.", "model.visual.")) for n in load_state_dict(path))


def test_rope_parameters_read_and_unsupported_named(tmp_path: Path) -> None:
    cfg = tiny_config("Qwen3.5-122B-A10B")
    args = pm.ModelArgs.from_hf(cfg)
    assert (args.rope_theta, args.partial_rotary_factor, args.rotary_dim) == (10000000, 0.25, 8)
    cfg["text_config"]["rope_parameters"]["rope_type"] = "yarn"
    with pytest.raises(ValueError, match=r"rope_parameters.rope_type='yarn' is not supported"):
        pm.ModelArgs.from_hf(cfg)
    cfg = tiny_config("Qwen3.5-122B-A10B")
    cfg["text_config"]["rope_parameters"]["mrope_section"] = [3, 3, 3]
    with pytest.raises(
        ValueError,
        match=r"rope_parameters.mrope_section=\[3, 3, 3\] does not sum to rotary_dim/2=4",
    ):
        pm.ModelArgs.from_hf(cfg)
    glm = tiny_config("GLM-Z1-9B-0414") | {"rope_scaling": {"type": "yarn", "factor": 4.0}}
    with pytest.raises(ValueError, match=r"rope_scaling.rope_type='yarn'"):
        pm.ModelArgs.from_hf(glm)


def test_fused_folder_missing_tensor_names_it(tmp_path: Path) -> None:
    path = write_tiny("Qwen3.5-122B-A10B", tmp_path / "q35", shards=1)
    names = [n for n, _ in hub_tensors(tiny_config("Qwen3.5-122B-A10B"))]
    assert "model.language_model.layers.3.mlp.experts.down_proj" in names
    state = {
        k: v
        for k, v in load_state_dict(path).items()
        if k != "model.layers.3.mlp.experts.down_proj"
    }
    from safetensors.torch import save_file

    save_file(
        {
            k.replace("model.", "model.language_model.", 1)
            if k.startswith("model.")
            else k: v.contiguous()
            for k, v in state.items()
        },
        str(path / "model.safetensors"),
    )
    with pytest.raises(
        ValueError,
        match=r"tensor 'model.layers.3.mlp.experts.down_proj' missing from the checkpoint",
    ):
        check_folder(path)
