"""Token sampling: greedy, temperature, top-k, top-p, with per-request reproducible seeds.

One vectorised pass over every sequence of a step, whatever their parameters. A token is
drawn by inverting the (filtered) cumulative distribution at a uniform number u. A seeded
request's u at generated index n is a hash of (seed, n) alone, so a sequence aborted on one
replica and resumed on another samples the same tokens an uninterrupted run would; other
requests draw u from the engine's generator. The returned log-prob is that of the sampled
token under the temperature-scaled distribution before top-k/top-p truncation (the raw model
distribution for greedy), which is what the RL loss's behaviour policy needs.
"""

from __future__ import annotations

import torch

from pivot.engine.sequence import SamplingParams

_MASK64 = (1 << 64) - 1


def seeded_uniform(seed: int, index: int) -> float:
    """A uniform number in [0, 1) determined by (seed, index): splitmix64 of their mix."""
    z = (seed * 0x9E3779B97F4A7C15 + (index + 1) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return ((z ^ (z >> 31)) >> 11) * 2.0**-53


def sample(
    logits: torch.Tensor,
    params: list[SamplingParams],
    num_generated: list[int],
    generator: torch.Generator,
) -> tuple[list[int], list[float]]:
    """One token per row of `logits` [S, V]; returns (token ids, log-probs).

    One read of device values a step (the tokens and their log-probs, together): every choice
    that depends only on the requests is made on the host, and the requests' parameters reach the
    device in one copy."""
    logits = logits.float()
    device, vocab = logits.device, logits.shape[1]
    temps = [p.temperature for p in params]
    if not any(temps):  # all greedy
        lp = torch.log_softmax(logits, dim=-1)
        tokens = lp.argmax(-1)
    else:
        top_k = [p.top_k if 0 < p.top_k < vocab else vocab for p in params]
        host = torch.tensor(
            [
                [float(t == 0) for t in temps],
                [t or 1.0 for t in temps],
                top_k,
                [p.top_p for p in params],
            ],
            dtype=torch.float32,
        )
        table = host.pin_memory().to(device, non_blocking=True) if device.type == "cuda" else host
        greedy, scale = table[0].bool(), table[1]
        lp = torch.log_softmax(logits / scale[:, None], dim=-1)
        u = torch.rand(len(params), generator=generator, device=device)
        seeded = [
            (i, seeded_uniform(p.seed, n))
            for i, (p, n) in enumerate(zip(params, num_generated))
            if p.seed is not None
        ]
        if seeded:
            rows, values = zip(*seeded)
            u[list(rows)] = torch.tensor(values, dtype=u.dtype).to(device)
        filtered = any(k < vocab for k in top_k) or any(p.top_p < 1 for p in params)
        tokens = torch.where(greedy, lp.argmax(-1), _draw(lp, table[2], table[3], u, filtered))
    picked = lp.gather(1, tokens[:, None])[:, 0]
    # token ids are exact in float64 (below 2**53): one copy to the host for both
    both = torch.stack((tokens.to(torch.float64), picked.to(torch.float64))).tolist()
    return [int(t) for t in both[0]], both[1]


def _draw(
    lp: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor, u: torch.Tensor, filtered: bool
) -> torch.Tensor:
    """Inverse-CDF draw per row of log-probs `lp` after each row's top-k / top-p filter (none
    when no row has one: `filtered`, decided on the host)."""
    vocab, device = lp.shape[1], lp.device
    if not filtered:
        probs, order = lp.exp(), None
    else:
        sorted_lp, order = lp.sort(dim=-1, descending=True)
        probs = sorted_lp.exp() * (torch.arange(vocab, device=device) < top_k[:, None])
        probs = probs / probs.sum(-1, keepdim=True)
        # drop a token when the mass before it already reaches top_p (keeps at least one)
        probs = probs.masked_fill((probs.cumsum(-1) - probs) >= top_p[:, None], 0.0)
    cdf = probs.cumsum(-1)
    index = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True).clamp(max=vocab - 1)
    return (index if order is None else order.gather(1, index))[:, 0]
