"""Qwen3.5-MoE (hybrid Gated DeltaNet + gated attention, MoE with a shared expert) against transformers.

The folder is transformers' own `Qwen3_5MoeForConditionalGeneration` (vision tower included, as
the hub ships it); Pivot loads its language model only. The chunked and the recurrent forms of
the delta rule are checked against each other, and a layer continued from its carried state
against one pass over the whole sequence.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import pivot.model as pm
from pivot.model.deltanet import chunked_delta_rule, recurrent_delta_rule

transformers = pytest.importorskip("transformers")

TEXT = {
    "vocab_size": 97,
    "hidden_size": 32,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 8,
    "linear_value_head_dim": 8,
    "linear_conv_kernel_dim": 4,
    "num_experts": 4,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 16,
    "shared_expert_intermediate_size": 24,
    "rms_norm_eps": 1e-6,
}
VISION = {
    "depth": 1,
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_heads": 2,
    "out_hidden_size": 32,
    "patch_size": 4,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, torch.nn.Module]:
    torch.manual_seed(0)
    cfg = transformers.Qwen3_5MoeConfig(text_config=TEXT, vision_config=VISION)
    hf = transformers.Qwen3_5MoeForConditionalGeneration(cfg).eval()
    with torch.no_grad():  # non-trivial norms, router and decay parameters so every one matters
        for name, p in hf.named_parameters():
            if "norm" in name or "dt_bias" in name or "A_log" in name:
                p.add_(torch.randn_like(p) * 0.1)
            if name.endswith("mlp.gate.weight"):
                p.normal_(0, 0.5)
            if "linear_attn.in_proj" in name or "linear_attn.out_proj" in name:
                p.mul_(10.0)  # default init leaves the linear-attention branch too small to test
    path = tmp_path_factory.mktemp("qwen35")
    hf.save_pretrained(path)
    return path, hf


def test_logits_match_transformers(folder: tuple[Path, torch.nn.Module]) -> None:
    path, hf = folder
    ours = pm.from_pretrained(path).eval()
    assert ours.args.layer_types == ["linear_attention"] * 3 + ["full_attention"]
    assert not any("visual" in n for n in ours.state_dict())
    ids = torch.randint(0, 97, (2, 13), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), hf(input_ids=ids).logits, atol=1e-4, rtol=1e-4)


def test_chunked_equals_recurrent_delta_rule() -> None:
    g = torch.Generator().manual_seed(1)
    b, t, hk, hv, dk, dv = 2, 11, 2, 4, 8, 6
    q, k = torch.randn(b, t, hk, dk, generator=g), torch.randn(b, t, hk, dk, generator=g)
    v = torch.randn(b, t, hv, dv, generator=g)
    decay = -torch.rand(b, t, hv, generator=g) * 2
    beta = torch.rand(b, t, hv, generator=g)
    s0 = torch.randn(b, hv, dk, dv, generator=g)
    o_rec, s_rec = recurrent_delta_rule(q, k, v, decay, beta, s0)
    for chunk in (1, 4, 64):
        o_chk, s_chk = chunked_delta_rule(q, k, v, decay, beta, s0, chunk=chunk)
        torch.testing.assert_close(o_chk, o_rec, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(s_chk, s_rec, atol=1e-5, rtol=1e-5)


def test_layer_continues_from_its_state(folder: tuple[Path, torch.nn.Module]) -> None:
    """Prefill 7 tokens, then decode 3 one at a time and prefill 2 more: equals one pass."""
    layer = pm.from_pretrained(folder[0]).model.layers[0].linear_attn
    x = torch.randn(2, 12, 32, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        whole, _ = layer(x)
        parts, state = [], None
        for lo, hi in ((0, 7), (7, 8), (8, 9), (9, 10), (10, 12)):
            out, state = layer(x[:, lo:hi], state)
            parts.append(out)
    torch.testing.assert_close(torch.cat(parts, dim=1), whole, atol=1e-5, rtol=1e-5)
