"""Decoder-only transformer (Qwen2, Qwen3, Llama, Qwen3-MoE, GLM-4, Qwen3.5-MoE hybrid) with HF names.

The module tree mirrors `transformers` (`model.layers.{i}.self_attn.q_proj` ...), so a state
dict loads from and saves to HF checkpoints without renaming. No torch.distributed here:
tensor parallelism is applied from outside by sharding weights and setting each attention's
local head counts (`n_heads`, `n_kv_heads`), and row-parallel outputs are reduced by hooks.

Attention is pluggable: `forward(..., attn=backend)` hands each layer's post-RoPE q/k/v to
`backend(layer_idx, q, k, v)`, and each linear-attention layer to
`backend.linear_attention(layer_idx, layer, x)` (which carries per-sequence state); the engine
passes its paged-KV backend, everything else uses the dense causal default over whole sequences.
That default's kernel is the model's `attention` ("sdpa" or "flash", `--model.attention`), and
only that: flash-attn is used when asked for, never because it happens to be installed.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from pivot.model.args import ModelArgs
from pivot.model.deltanet import GatedDeltaNet
from pivot.model.layers import RMSNorm, RotaryEmbedding, apply_rotary, make_linear
from pivot.model.mlp import MLP, FusedMLP
from pivot.model.moe import SparseMoeBlock


class AttentionBackend(Protocol):
    def __call__(
        self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        """q: [B, T, Hq, D], k/v: [B, T, Hkv, D] after RoPE -> [B, T, Hq, D]."""
        ...

    def linear_attention(
        self, layer_idx: int, layer: GatedDeltaNet, x: torch.Tensor
    ) -> torch.Tensor:
        """Run linear-attention `layer` on x [B, T, H], carrying each sequence's recurrent state."""
        ...


ATTENTION_KERNELS = ("sdpa", "flash")


def dense_causal_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kernel: str = "sdpa"
) -> torch.Tensor:
    """Causal self-attention over whole sequences (right padding is harmless under causality).
    `kernel="flash"` always calls flash-attn (its own errors say what it cannot run: no silent
    fall back to SDPA); pivot.kernels checks at start-up that it imports."""
    if kernel == "flash":
        from flash_attn import flash_attn_func  # GPU only, built from source

        return flash_attn_func(q, k, v, causal=True)
    out = F.scaled_dot_product_attention(  # GQA native: K/V are never repeated to Hq heads
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True, enable_gqa=True
    )
    return out.transpose(1, 2)


class Attention(nn.Module):
    def __init__(
        self, args: ModelArgs, layer_idx: int, linear: str, attention: str = "sdpa"
    ) -> None:
        super().__init__()
        self.layer_idx, self.kernel = layer_idx, attention
        self.interleaved = args.glm_layout
        self.gated = (
            args.qwen35_layout
        )  # q_proj also emits a per-head output gate: [q_h, gate_h] per head
        self.head_dim = args.head_dim
        self.n_heads = args.num_attention_heads  # local count: TP divides it
        self.n_kv_heads = args.num_key_value_heads
        q_out, kv_out = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        self.q_proj = make_linear(
            args.hidden_size, q_out * (2 if self.gated else 1), args.attention_bias, linear
        )
        self.k_proj = make_linear(args.hidden_size, kv_out, args.attention_bias, linear)
        self.v_proj = make_linear(args.hidden_size, kv_out, args.attention_bias, linear)
        self.o_proj = make_linear(q_out, args.hidden_size, False, linear)
        if args.qk_norm:
            self.q_norm = make_norm(args, self.head_dim)
            self.k_norm = make_norm(args, self.head_dim)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attn: AttentionBackend | None
    ) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.n_heads, -1)
        if self.gated:
            q, gate = q.chunk(2, dim=-1)
        k = self.k_proj(x).view(b, t, self.n_kv_heads, self.head_dim)
        v = self.v_proj(x).view(b, t, self.n_kv_heads, self.head_dim)
        if hasattr(self, "q_norm"):
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = (
            apply_rotary(q, cos, sin, self.interleaved),
            apply_rotary(k, cos, sin, self.interleaved),
        )
        out = (
            dense_causal_attention(q, k, v, self.kernel)
            if attn is None
            else attn(self.layer_idx, q, k, v)
        )
        out = out.reshape(b, t, self.n_heads * self.head_dim)
        if self.gated:
            out = out * torch.sigmoid(gate.reshape(b, t, -1))
        return self.o_proj(out)


def make_norm(args: ModelArgs, dim: int) -> RMSNorm:
    return RMSNorm(dim, args.rms_norm_eps, zero_centered=args.qwen35_layout)


def feed_forward(args: ModelArgs, layer_idx: int, linear: str) -> nn.Module:
    if args.is_moe_layer(layer_idx):
        return SparseMoeBlock(args, linear)
    mlp = FusedMLP if args.glm_layout else MLP
    return mlp(args.hidden_size, args.intermediate_size, linear)


class DecoderLayer(nn.Module):
    def __init__(
        self, args: ModelArgs, layer_idx: int, linear: str, attention: str = "sdpa"
    ) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.input_layernorm = make_norm(args, args.hidden_size)
        if args.is_linear_attention(layer_idx):
            self.linear_attn = GatedDeltaNet(args, layer_idx, linear)
        else:
            self.self_attn = Attention(args, layer_idx, linear, attention)
        self.post_attention_layernorm = make_norm(args, args.hidden_size)
        self.mlp = feed_forward(args, layer_idx, linear)
        if args.glm_layout:  # GLM-4 also normalises each branch's output before the residual add
            self.post_self_attn_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
            self.post_mlp_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attn: AttentionBackend | None
    ) -> torch.Tensor:
        if hasattr(self, "linear_attn"):
            normed = self.input_layernorm(x)
            h = (
                self.linear_attn(normed)[0]
                if attn is None
                else attn.linear_attention(self.layer_idx, self.linear_attn, normed)
            )
        else:
            h = self.self_attn(self.input_layernorm(x), cos, sin, attn)
        if hasattr(self, "post_self_attn_layernorm"):
            h = self.post_self_attn_layernorm(h)
        x = x + h
        h = self.mlp(self.post_attention_layernorm(x))
        if hasattr(self, "post_mlp_layernorm"):
            h = self.post_mlp_layernorm(h)
        return x + h


class DecoderModel(nn.Module):
    def __init__(self, args: ModelArgs, linear: str, attention: str = "sdpa") -> None:
        super().__init__()
        # nn.Module: engine TP swaps in its VocabParallelEmbedding (pivot/engine/tp.py)
        self.embed_tokens: nn.Module = nn.Embedding(args.vocab_size, args.hidden_size)
        self.layers = nn.ModuleList(
            DecoderLayer(args, i, linear, attention) for i in range(args.num_hidden_layers)
        )
        self.norm = make_norm(args, args.hidden_size)
        self.rotary = RotaryEmbedding(args.rotary_dim, args.rope_theta, interleaved=args.glm_layout)

    def forward(
        self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionBackend | None = None
    ) -> torch.Tensor:
        x = self.embed_tokens(input_ids)
        cos, sin = self.rotary(positions)
        for layer in self.layers:
            x = layer(x, cos, sin, attn)
        return self.norm(x)


class LMHead(Protocol):
    def __call__(self, hidden: torch.Tensor, lm_head: nn.Module) -> torch.Tensor:
        """What the caller wants of the final hidden states [B, T, H], given the LM head
        (pivot/rl/logprobs.py: log-probs of chosen positions, logits a chunk at a time)."""
        ...


class CausalLM(nn.Module):
    """`model(input_ids[B, T]) -> logits[B, T, vocab]`; `positions` default to 0..T-1.
    `attention`: the whole-sequence kernel (the engine passes its own paged one instead).
    `head`: in place of the whole logits, `head(hidden, lm_head)`, called inside forward so
    that FSDP has the LM head's weight gathered (and gathers it again for backward)."""

    def __init__(self, args: ModelArgs, linear: str = "torch", attention: str = "sdpa") -> None:
        super().__init__()
        if attention not in ATTENTION_KERNELS:
            raise ValueError(
                f"attention: {attention!r} is not one of {', '.join(ATTENTION_KERNELS)}"
            )
        self.args, self.attention = args, attention
        self.model = DecoderModel(args, linear, attention)
        self.lm_head = make_linear(args.hidden_size, args.vocab_size, False, linear)
        if args.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor | None = None,
        attn: AttentionBackend | None = None,
        head: LMHead | None = None,
    ) -> torch.Tensor:
        if positions is None:
            positions = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(
                input_ids
            )
        hidden = self.model(input_ids, positions, attn)
        return self.lm_head(hidden) if head is None else head(hidden, self.lm_head)
