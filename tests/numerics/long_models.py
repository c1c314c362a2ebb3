"""Tiny random models of each policy and judge family, with the real rotary settings of the
checkpoints users load, built and saved by transformers' own classes, sharp enough that rotary
precision decides the log-probs at thousands of positions.

Rotary settings (each family's hub config.json): Qwen2.5-7B-Instruct rope_theta 1e6; Qwen3-8B
rope_theta 1e6 with q/k RMSNorm; GLM-4-9B-0414 rope_theta 1e4, partial_rotary_factor 0.5 and
interleaved pairs; Qwen3.5-122B-A10B rope_theta 1e7, partial_rotary_factor 0.25, multimodal RoPE
(text positions equal on all axes), gated attention beside linear-attention layers.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
import transformers

from tests.engine.hf_models import QWEN35_VISION

POSITIONS = 4096
LINEAR_SCALE = 3.0
VOCAB = 128
SHAPE = {
    "vocab_size": VOCAB,
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "max_position_embeddings": 2 * POSITIONS,
    "eos_token_id": 1,
    "pad_token_id": 0,
}
QK_NORM_SCALE, QK_PROJ_SCALE = 4.0, 16.0
"""q and k's RMSNorm scales (Qwen3, Qwen3.5), else their projections, multiplied by these: a
default init attends almost uniformly, so the angle error of a rounded rotary table would not
show; a trained model's heads are sharp."""


def _rope(theta: float, partial: float = 1.0) -> dict[str, object]:
    return {"rope_type": "default", "rope_theta": theta, "partial_rotary_factor": partial}


FAMILIES: dict[str, Callable[[], torch.nn.Module]] = {
    "qwen2.5": lambda: transformers.Qwen2ForCausalLM(
        transformers.Qwen2Config(rope_parameters=_rope(1e6), **SHAPE)
    ),
    "qwen3": lambda: transformers.Qwen3ForCausalLM(
        transformers.Qwen3Config(rope_parameters=_rope(1e6), **SHAPE)
    ),
    "glm4": lambda: transformers.Glm4ForCausalLM(
        transformers.Glm4Config(rope_parameters=_rope(1e4, 0.5), **SHAPE)
    ),
    "qwen3.5": lambda: transformers.Qwen3_5MoeForConditionalGeneration(
        transformers.Qwen3_5MoeConfig(
            text_config={
                **SHAPE,
                "rope_parameters": {
                    **_rope(1e7, 0.25),
                    "mrope_section": [2, 1, 1],
                    "mrope_interleaved": True,
                },
                "layer_types": ["linear_attention", "full_attention"],
                "linear_num_key_heads": 2,
                "linear_num_value_heads": 4,
                "linear_key_head_dim": 16,
                "linear_value_head_dim": 16,
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


def save_long_model(path: Path, family: str, seed: int = 0) -> torch.nn.Module:
    """The fp32 model (eval) after saving it to `path` as the hub lays it out."""
    torch.manual_seed(seed)
    model = FAMILIES[family]().eval()
    with torch.no_grad():
        model.lm_head.weight.mul_(4.0)
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
            if name.endswith(("q_norm.weight", "k_norm.weight")):
                if family == "qwen3.5":  # zero-centred RMSNorm: the scale is 1 + w
                    p.add_(2 * QK_NORM_SCALE - 1.0)
                else:
                    p.mul_(QK_NORM_SCALE)
            elif name.endswith(("q_proj.weight", "k_proj.weight")) and "linear_attn" not in name:
                p.mul_(QK_PROJ_SCALE)
            if "linear_attn.in_proj" in name or "linear_attn.out_proj" in name:
                p.mul_(
                    LINEAR_SCALE
                )  # the default init leaves the linear-attention branch too small
    model.save_pretrained(path)
    return model


def long_prompt(seed: int, n: int = POSITIONS) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(2, VOCAB, (n,), generator=g).tolist()


@torch.no_grad()
def reference_logprobs(
    model: torch.nn.Module, prompt: list[int], response: list[int]
) -> list[float]:
    """Log-probs of `response` given `prompt` under `model` (transformers), in one forward."""
    device = next(model.parameters()).device
    ids = torch.tensor([prompt + response], device=device)
    logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    lp = torch.log_softmax(logits, dim=-1)
    return lp.gather(1, torch.tensor(response, device=device)[:, None])[:, 0].tolist()


def mean_abs(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b) > 0
    return sum(abs(x - y) for x, y in zip(a, b)) / len(a)


def transformers_bf16_error(
    path: Path,
    family: str,
    prompt: list[int],
    response: list[int],
    fp32: list[float],
    device: str = "cpu",
) -> float:
    """Transformers' own bf16 error on `response`: the mean |dlogp| of the folder loaded with
    `dtype=bfloat16` (its rotary table stays fp32, so a fair bf16 model) against `fp32`, the
    fp32 log-probs of the same tokens. The scale of every tolerance of the bf16 tier."""
    cls = (
        transformers.Qwen3_5MoeForConditionalGeneration
        if family == "qwen3.5"
        else transformers.AutoModelForCausalLM
    )
    hf16 = cls.from_pretrained(path, dtype=torch.bfloat16).to(device).eval()
    return mean_abs(reference_logprobs(hf16, prompt, response), fp32)
