"""Tiny random models of the hub families, built and saved by transformers' own classes."""

from __future__ import annotations

from pathlib import Path

import torch
import transformers

EOS = [1, 2]  # a list of end ids, as GLM-4 and many instruct models ship
SHAPE = {
    "vocab_size": 96,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "max_position_embeddings": 256,
    "eos_token_id": EOS,
    "pad_token_id": 0,
}
QWEN35_VISION = {
    "depth": 1,
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_heads": 2,
    "out_hidden_size": 64,
    "patch_size": 4,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
}
"""The smallest vision tower Qwen3.5-MoE's config takes (Pivot serves the language model only)."""
FAMILIES = {
    "qwen3_moe": lambda: transformers.Qwen3MoeForCausalLM(
        transformers.Qwen3MoeConfig(
            num_experts=6,
            num_experts_per_tok=2,
            moe_intermediate_size=32,
            norm_topk_prob=True,
            mlp_only_layers=[1],
            **SHAPE,
        )
    ),
    "glm4": lambda: transformers.Glm4ForCausalLM(
        transformers.Glm4Config(partial_rotary_factor=0.5, **SHAPE)
    ),
    # layers 0, 1 linear attention (Gated DeltaNet), layer 2 gated full attention; MoE + shared expert
    "qwen3_5_moe": lambda: transformers.Qwen3_5MoeForConditionalGeneration(
        transformers.Qwen3_5MoeConfig(
            text_config={
                **SHAPE,
                "layer_types": ["linear_attention", "linear_attention", "full_attention"],
                "linear_num_key_heads": 2,
                "linear_num_value_heads": 4,
                "linear_key_head_dim": 8,
                "linear_value_head_dim": 8,
                "linear_conv_kernel_dim": 4,
                "num_experts": 4,
                "num_experts_per_tok": 2,
                "moe_intermediate_size": 32,
                "shared_expert_intermediate_size": 48,
            },
            vision_config=QWEN35_VISION,
        )
    ),
}


def save_hf_model(path: Path, family: str, seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = FAMILIES[family]().eval()
    with (
        torch.no_grad()
    ):  # sharp logits so greedy has clear winners; non-trivial norms, biases, router
        model.lm_head.weight.mul_(4.0)
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
            if name.endswith("mlp.gate.weight"):
                p.normal_(0, 0.5)
            if "linear_attn.in_proj" in name or "linear_attn.out_proj" in name:
                p.mul_(10.0)  # default init leaves the linear-attention branch too small to matter
    model.save_pretrained(path)
    return model
