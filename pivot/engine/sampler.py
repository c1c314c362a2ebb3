"""Token sampling: greedy, temperature, top-k, top-p, with per-request reproducible seeds.

A seeded request draws its token at generated index n from a generator seeded by
(seed, n) alone, so a sequence aborted on one replica and resumed on another samples the
same tokens an uninterrupted run would. The returned log-prob is that of the sampled token
under the temperature-scaled distribution before top-k/top-p truncation (the raw model
distribution for greedy), which is what the RL loss's behaviour policy needs.
"""
from __future__ import annotations

import torch

from pivot.engine.sequence import SamplingParams

_MIX = 0x9E3779B97F4A7C15  # golden-ratio constant: decorrelates consecutive indices


def seed_for(seed: int, index: int) -> int:
    return (seed * _MIX + index * 0xBF58476D1CE4E5B9 + 1) % (1 << 63)


def filter_logits(logits: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Mask (to -inf) everything outside the top-k / nucleus of a 1-D logits row."""
    if top_k > 0 and top_k < logits.numel():
        kth = torch.topk(logits, top_k).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        probs = sorted_logits.softmax(-1)
        # drop a token when the mass before it already reaches top_p (keeps at least one)
        drop = (probs.cumsum(-1) - probs) >= top_p
        logits = logits.masked_fill(torch.zeros_like(drop).scatter(0, order, drop), float("-inf"))
    return logits


def sample(
    logits: torch.Tensor, params: list[SamplingParams], num_generated: list[int], generator: torch.Generator
) -> tuple[list[int], list[float]]:
    """One token per row of `logits` [S, V] (fp32); returns (token ids, log-probs)."""
    logits = logits.float()
    greedy = [p.temperature == 0 for p in params]
    tokens: list[int] = [0] * len(params)
    logprobs: list[float] = [0.0] * len(params)
    if any(greedy):
        rows = [i for i, g in enumerate(greedy) if g]
        lp = torch.log_softmax(logits[rows], dim=-1)
        best = lp.argmax(-1)
        picked = lp.gather(1, best[:, None])[:, 0]
        for r, t, l in zip(rows, best.tolist(), picked.tolist()):
            tokens[r], logprobs[r] = t, l
    for i, p in enumerate(params):
        if greedy[i]:
            continue
        scaled = logits[i] / p.temperature
        lp = torch.log_softmax(scaled, -1)
        probs = filter_logits(scaled, p.top_k, p.top_p).softmax(-1)
        gen = generator
        if p.seed is not None:
            gen = torch.Generator(device=logits.device).manual_seed(seed_for(p.seed, num_generated[i]))
        t = int(torch.multinomial(probs, 1, generator=gen).item())
        tokens[i], logprobs[i] = t, float(lp[t])
    return tokens, logprobs
