"""The tensor names Pivot publishes (GPS Reads push them to sglang by name) against the names
sglang 0.5.23's model classes load, read from the wheel with `ast`. Name-level: every dotted
segment of a published name must be a module attribute (`self.<segment> = ...`) or a checkpoint
name the loader maps (its string constants) in the model's sglang files; experts must use the
checkpoint names the class's expert mapping is built from. Shapes are not checked here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from pivot.gps.torch_specs import specs_from_checkpoint
from tests.engine.conftest import make_model
from tests.engine.hf_models import save_hf_model
from tests.engine.sglang_source import Source, fetch_wheel

MODELS = "sglang/srt/models/"
SGLANG_FILE = {
    "qwen2": "qwen2.py",
    "qwen3": "qwen3.py",
    "llama": "llama.py",
    "qwen3_moe": "qwen3_moe.py",
    "glm4": "glm4.py",
    "qwen3_5_moe": "qwen3_5.py",
}
"""The sglang file of each architecture Pivot serves (its EntryClass has the checkpoint's architecture)."""
ARCH = {
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "llama": "LlamaForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "glm4": "Glm4ForCausalLM",
    "qwen3_5_moe": "Qwen3_5MoeForConditionalGeneration",
}
SKIP = {"weight", "bias"}


@pytest.fixture(scope="module")
def src() -> Source:
    return Source(fetch_wheel("sglang", "0.5.23"))


def _files(src: Source, path: str, depth: int = 3) -> list[str]:
    """`path` and the sglang model / layer files it imports from, `depth` levels deep."""
    seen, todo = [path], [path]
    for _ in range(depth):
        nxt = []
        for p in todo:
            for node in ast.walk(src.tree(p)):
                if (
                    isinstance(node, ast.ImportFrom)
                    and node.module
                    and node.module.startswith(
                        (
                            "sglang.srt.models",
                            "sglang.srt.layers.layernorm",
                            "sglang.srt.model_loader.auto_loader",
                        )
                    )
                ):
                    f = node.module.replace(".", "/") + ".py"
                    if f in src.names and f not in seen:
                        seen.append(f)
                        nxt.append(f)
        todo = nxt
    return seen


def _vocabulary(src: Source, files: list[str]) -> set[str]:
    words: set[str] = set()
    for f in files:
        for node in ast.walk(src.tree(f)):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
                and isinstance(node.ctx, ast.Store)
            ):
                words.add(node.attr)
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                words |= set(re.split(r"[.{}]", node.value))
    return words


def _published(family: str, tmp: Path) -> dict[str, list[str]]:
    """The names GPS publishes for `family`: of a folder Pivot wrote and of one transformers wrote."""
    out = {}
    if family != "qwen3_5_moe":
        make_model(tmp / "pivot", family)
        out["pivot"] = [s.name for s in specs_from_checkpoint(tmp / "pivot")]
    if family in ("qwen3_moe", "glm4", "qwen3_5_moe"):
        save_hf_model(tmp / "hf", family, 0)
        out["transformers"] = [s.name for s in specs_from_checkpoint(tmp / "hf")]
    return out


@pytest.mark.parametrize("family", list(SGLANG_FILE))
def test_published_names_are_names_sglang_loads(src: Source, family: str, tmp_path: Path) -> None:
    path = MODELS + SGLANG_FILE[family]
    assert (
        f"class {ARCH[family]}(" in src.text(path)
        and ARCH[family] in src.text(path).split("EntryClass")[-1]
    )
    words = _vocabulary(src, _files(src, path))
    for writer, names in _published(family, tmp_path).items():
        unknown = sorted(
            {
                seg
                for n in names
                for seg in n.split(".")
                if not seg.isdigit() and seg not in SKIP and seg not in words
            }
        )
        assert not unknown, (
            f"{family} ({writer}'s names): segments sglang's {SGLANG_FILE[family]} never names: {unknown}"
        )


def test_moe_experts_use_the_checkpoint_names_of_the_expert_mapping(
    src: Source, tmp_path: Path
) -> None:
    """Qwen3-MoE: per-expert `mlp.experts.<i>.{gate,up,down}_proj`, the names sglang builds its
    expert mapping from (FusedMoE.make_expert_params_mapping's keywords)."""
    calls = [
        n
        for n in ast.walk(src.tree(MODELS + "qwen3_moe.py"))
        if isinstance(n, ast.Call) and ast.unparse(n.func).endswith("make_expert_params_mapping")
    ]
    assert calls
    kw = {k.arg: ast.unparse(k.value) for k in calls[0].keywords}
    assert (kw["ckpt_gate_proj_name"], kw["ckpt_up_proj_name"], kw["ckpt_down_proj_name"]) == (
        "'gate_proj'",
        "'up_proj'",
        "'down_proj'",
    )
    for writer, names in _published("qwen3_moe", tmp_path).items():
        experts = [n for n in names if ".mlp.experts." in n]
        assert experts and all(
            re.search(r"\.mlp\.experts\.\d+\.(gate|up|down)_proj\.weight$", n) for n in experts
        ), writer


def test_qwen3_5_fused_experts_are_split_as_sglang_expects(src: Source) -> None:
    """Qwen3.5-MoE checkpoints may hold fused experts: sglang loads `mlp.experts.gate_up_proj`
    ([experts, 2 * moe_intermediate, hidden], gate rows first: chunk(2, dim=-2) -> w1, w3) and
    `mlp.experts.down_proj`; per-expert names go through the expert mapping. Pivot's published
    fused tensors must keep that layout (pivot/model/ owns it)."""
    text = src.text(MODELS + "qwen3_5.py")
    assert '"experts.gate_up_proj" in name' in text and '"experts.down_proj" in name' in text
    assert "loaded_weight.chunk(2, dim=-2)" in text
    body = text[
        text.index('if "experts.gate_up_proj" in name:\n                            # experts') :
    ][:900]
    assert body.index('loaded_weight[0],\n                                "w1"') < body.index(
        'loaded_weight[1],\n                                "w3"'
    )
    assert (
        'name.replace(r"model.language_model.", r"model.")' in text
    )  # HF's language_model prefix is accepted
    assert (
        'if "mtp" in name' in text and 'if "visual" in name' in text
    )  # vision and MTP weights are skipped
