"""Decoder-only transformer for the Qwen2, Qwen3 and Llama families, with Hugging Face names.

The module tree mirrors `transformers` (`model.layers.{i}.self_attn.q_proj` ...), so a state
dict loads from and saves to HF checkpoints without renaming. No torch.distributed here:
tensor parallelism is applied from outside by sharding weights and setting each attention's
local head counts (`n_heads`, `n_kv_heads`), and row-parallel outputs are reduced by hooks.

Attention is pluggable: `forward(..., attn=backend)` hands each layer's post-RoPE q/k/v to
`backend(layer_idx, q, k, v)`; the engine passes its paged-KV backend, everything else uses the
dense causal default.
"""
from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from pivot.model.args import ModelArgs


class AttentionBackend(Protocol):
    def __call__(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q: [B, T, Hq, D], k/v: [B, T, Hkv, D] after RoPE -> [B, T, Hq, D]."""
        ...


def dense_causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal self-attention over whole sequences (right padding is harmless under causality)."""
    if q.is_cuda and _flash_attn_func is not None and q.dtype in (torch.float16, torch.bfloat16):
        return _flash_attn_func(q, k, v, causal=True)
    rep = q.shape[2] // k.shape[2]
    if rep > 1:
        k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
    return out.transpose(1, 2)


try:  # optional GPU kernel; never required on CPU
    from flash_attn import flash_attn_func as _flash_attn_func  # type: ignore[import-not-found]
except ImportError:
    _flash_attn_func = None


def make_linear(in_features: int, out_features: int, bias: bool, kind: str) -> nn.Module:
    """torch Linear, or transformer-engine's (GPU, same parameter names) when asked for."""
    if kind == "te":
        import transformer_engine.pytorch as te  # type: ignore[import-not-found]

        return te.Linear(in_features, out_features, bias=bias)
    return nn.Linear(in_features, out_features, bias=bias)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # normalise in fp32 like the reference implementation, then cast back
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


class RotaryEmbedding(nn.Module):
    def __init__(self, head_dim: int, theta: float) -> None:
        super().__init__()
        inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
        self.register_buffer("inv_freq", inv_freq, persistent=False)

    def forward(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.float()[..., None] * self.inv_freq.to(positions.device)
        emb = torch.cat([freqs, freqs], dim=-1)
        return emb.cos(), emb.sin()


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x: [B, T, H, D]; cos/sin: [B, T, D] in fp32."""
    x32 = x.float()
    half = x32.shape[-1] // 2
    rotated = torch.cat([-x32[..., half:], x32[..., :half]], dim=-1)
    return (x32 * cos[:, :, None] + rotated * sin[:, :, None]).to(x.dtype)


class Attention(nn.Module):
    def __init__(self, args: ModelArgs, layer_idx: int, linear: str) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.head_dim = args.head_dim
        self.n_heads = args.num_attention_heads  # local count: TP divides it
        self.n_kv_heads = args.num_key_value_heads
        q_out, kv_out = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        self.q_proj = make_linear(args.hidden_size, q_out, args.attention_bias, linear)
        self.k_proj = make_linear(args.hidden_size, kv_out, args.attention_bias, linear)
        self.v_proj = make_linear(args.hidden_size, kv_out, args.attention_bias, linear)
        self.o_proj = make_linear(q_out, args.hidden_size, False, linear)
        if args.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, args.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, args.rms_norm_eps)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attn: AttentionBackend | None
    ) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.n_heads, self.head_dim)
        k = self.k_proj(x).view(b, t, self.n_kv_heads, self.head_dim)
        v = self.v_proj(x).view(b, t, self.n_kv_heads, self.head_dim)
        if hasattr(self, "q_norm"):
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        out = dense_causal_attention(q, k, v) if attn is None else attn(self.layer_idx, q, k, v)
        return self.o_proj(out.reshape(b, t, self.n_heads * self.head_dim))


class MLP(nn.Module):
    def __init__(self, args: ModelArgs, linear: str) -> None:
        super().__init__()
        self.gate_proj = make_linear(args.hidden_size, args.intermediate_size, False, linear)
        self.up_proj = make_linear(args.hidden_size, args.intermediate_size, False, linear)
        self.down_proj = make_linear(args.intermediate_size, args.hidden_size, False, linear)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, args: ModelArgs, layer_idx: int, linear: str) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.self_attn = Attention(args, layer_idx, linear)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.mlp = MLP(args, linear)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attn: AttentionBackend | None
    ) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, attn)
        return x + self.mlp(self.post_attention_layernorm(x))


class DecoderModel(nn.Module):
    def __init__(self, args: ModelArgs, linear: str) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(args.vocab_size, args.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(args, i, linear) for i in range(args.num_hidden_layers))
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.rotary = RotaryEmbedding(args.head_dim, args.rope_theta)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionBackend | None = None
    ) -> torch.Tensor:
        x = self.embed_tokens(input_ids)
        cos, sin = self.rotary(positions)
        for layer in self.layers:
            x = layer(x, cos, sin, attn)
        return self.norm(x)


class CausalLM(nn.Module):
    """`model(input_ids[B, T]) -> logits[B, T, vocab]`; `positions` default to 0..T-1."""

    def __init__(self, args: ModelArgs, linear: str = "torch") -> None:
        super().__init__()
        self.args = args
        self.model = DecoderModel(args, linear)
        self.lm_head = make_linear(args.hidden_size, args.vocab_size, False, linear)
        if args.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor | None = None,
        attn: AttentionBackend | None = None,
    ) -> torch.Tensor:
        if positions is None:
            positions = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
        return self.lm_head(self.model(input_ids, positions, attn))
