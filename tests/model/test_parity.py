"""Pivot's decoder against `transformers` for each family, both load directions."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import pivot.model as pm

transformers = pytest.importorskip("transformers")

FAMILIES = {
    "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM, {}),
    "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM, {"head_dim": 16}),
    "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM, {}),
    # layers 0 and 2 are MoE, layer 1 dense (mlp_only_layers); top-2 of 4 experts, renormalised
    "qwen3_moe": (
        transformers.Qwen3MoeConfig,
        transformers.Qwen3MoeForCausalLM,
        {
            "head_dim": 16,
            "num_hidden_layers": 3,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 24,
            "norm_topk_prob": True,
            "mlp_only_layers": [1],
        },
    ),
    # every other layer MoE (decoder_sparse_step), top-3 of 5 experts, not renormalised
    "qwen3_moe_step2": (
        transformers.Qwen3MoeConfig,
        transformers.Qwen3MoeForCausalLM,
        {
            "head_dim": 16,
            "num_hidden_layers": 2,
            "num_experts": 5,
            "num_experts_per_tok": 3,
            "moe_intermediate_size": 16,
            "norm_topk_prob": False,
            "decoder_sparse_step": 2,
        },
    ),
    # partial interleaved rotary on half of head_dim, q/k/v biases, post-branch norms, fused gate_up
    "glm4": (
        transformers.Glm4Config,
        transformers.Glm4ForCausalLM,
        {
            "head_dim": 16,
            "partial_rotary_factor": 0.5,
            "pad_token_id": 0,
            "eos_token_id": [1, 2],
        },
    ),
}


def _hf_model(family: str, tie: bool, seed: int) -> torch.nn.Module:
    cfg_cls, model_cls, extra = FAMILIES[family]
    torch.manual_seed(seed)
    shape = {
        "vocab_size": 97,
        "hidden_size": 48,
        "intermediate_size": 80,
        "num_hidden_layers": 2,
        "num_attention_heads": 6,
        "num_key_value_heads": 2,
    }
    cfg = cfg_cls(rope_theta=5000.0 + seed, tie_word_embeddings=tie, **{**shape, **extra})
    model = model_cls(cfg).eval()
    with torch.no_grad():  # random non-trivial norms and biases so every parameter matters
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
            if name.endswith("mlp.gate.weight"):  # transformers starts the router at zero: no ties
                p.normal_(0, 0.5)
    return model


@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("tie", [False, True])
def test_logits_match_transformers(family: str, tie: bool, tmp_path: Path) -> None:
    hf = _hf_model(family, tie, seed=len(family) + tie)
    hf.save_pretrained(tmp_path / "hf")
    ours = pm.from_pretrained(tmp_path / "hf").eval()
    ids = torch.randint(0, 97, (3, 11), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = hf(ids).logits
        got = ours(ids)
    assert got.shape == (3, 11, 97)
    torch.testing.assert_close(got, ref, atol=1e-4, rtol=1e-4)

    # and back: a checkpoint Pivot writes loads in transformers with the same logits
    pm.save_pretrained(ours, tmp_path / "ours", max_shard_bytes=20_000)  # force shards + index
    assert (tmp_path / "ours" / "model.safetensors.index.json").is_file()
    hf2 = FAMILIES[family][1].from_pretrained(tmp_path / "ours").eval()
    with torch.no_grad():
        torch.testing.assert_close(hf2(ids).logits, ref, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(
        pm.from_pretrained(tmp_path / "ours")(ids).detach(), got, atol=0, rtol=0
    )


def test_loads_transformers_shards(tmp_path: Path) -> None:
    """A folder transformers wrote in many shards (index + model-0000k-of-0000n files) loads whole."""
    hf = _hf_model("qwen3_moe", tie=False, seed=5)
    hf.save_pretrained(tmp_path, max_shard_size="40KB")
    assert len(list(tmp_path.glob("model-*-of-*.safetensors"))) > 3
    assert (tmp_path / "model.safetensors.index.json").is_file() and not (
        tmp_path / "model.safetensors"
    ).exists()
    ids = torch.randint(0, 97, (2, 7), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(
            pm.from_pretrained(tmp_path)(ids), hf(ids).logits, atol=1e-4, rtol=1e-4
        )
