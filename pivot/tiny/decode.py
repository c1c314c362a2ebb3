"""Batched KV-cache decoding for the tiny models' build and evaluation (self-contained: the
build must not depend on the engine it later serves)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from pivot.model.transformer import CausalLM


class _KVCache:
    """Attention backend with a dense KV cache and a key-padding mask for left-padded prompts."""

    def __init__(self, layers: int, valid: torch.Tensor) -> None:
        self.k: list[torch.Tensor | None] = [None] * layers
        self.v: list[torch.Tensor | None] = [None] * layers
        self.valid = valid  # [B, S] which cached keys are real tokens

    def __call__(
        self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        prev_k, prev_v = self.k[layer_idx], self.v[layer_idx]
        k = k if prev_k is None else torch.cat([prev_k, k], dim=1)
        v = v if prev_v is None else torch.cat([prev_v, v], dim=1)
        self.k[layer_idx], self.v[layer_idx] = k, v
        t, s = q.shape[1], k.shape[1]
        causal = torch.ones(t, s, dtype=torch.bool).tril(diagonal=s - t)
        mask = causal[None] & self.valid[:, None, :s]
        mask = mask | _diag(t, s)[None]  # a pad query sees itself, so no row is fully masked
        rep = q.shape[2] // k.shape[2]
        k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask[:, None]
        )
        return out.transpose(1, 2)


def _diag(t: int, s: int) -> torch.Tensor:
    return torch.arange(s)[None, :] == (torch.arange(t) + s - t)[:, None]


@torch.no_grad()
def generate(
    model: CausalLM,
    prompts: list[list[int]],
    max_new: int,
    eos_id: int,
    temperature: float = 0.0,
    seed: int = 0,
) -> list[list[int]]:
    """Greedy (temperature 0) or sampled continuations, each cut at (and without) EOS."""
    gen = torch.Generator().manual_seed(seed)
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])  # pads are masked out
    valid = torch.tensor([[False] * (width - len(p)) + [True] * len(p) for p in prompts])
    pos = (valid.long().cumsum(1) - 1).clamp(min=0)
    cache = _KVCache(model.args.num_hidden_layers, valid)
    logits = model(ids, positions=pos, attn=cache)[:, -1]
    out: list[list[int]] = [[] for _ in prompts]
    done = torch.zeros(len(prompts), dtype=torch.bool)
    next_pos = pos[:, -1:] + 1
    for _ in range(max_new):
        if temperature > 0:
            token = torch.multinomial(
                F.softmax(logits.float() / temperature, -1), 1, generator=gen
            )[:, 0]
        else:
            token = logits.argmax(-1)
        for row in (~done).nonzero()[:, 0].tolist():
            if token[row].item() == eos_id:
                done[row] = True
            else:
                out[row].append(token[row].item())
        if done.all():
            break
        cache.valid = torch.cat([cache.valid, torch.ones(len(prompts), 1, dtype=torch.bool)], dim=1)
        logits = model(token[:, None], positions=next_pos, attn=cache)[:, -1]
        next_pos = next_pos + 1
    return out
