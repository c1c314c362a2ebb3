"""The trainer's log-probs as they were before packing (the oracle of the packed path): rows
right-padded to the longest, the whole vocabulary's fp32 logits at every position, and a
micro-batch plan that counts padded tokens. Kept here, not in pivot/, so the packed code is
checked against an independent computation."""

from __future__ import annotations

import torch
from torch import nn


def padded_logprobs(
    model: nn.Module,
    prompts: list[list[int]],
    responses: list[list[int]],
    temperature: float = 1.0,
    device: torch.device | str = "cpu",
    chunk_tokens: int = 0,  # the packed path's argument, unused here
) -> tuple[torch.Tensor, torch.Tensor]:
    lengths = [len(p) + len(r) for p, r in zip(prompts, responses)]
    width, r_max = max(lengths), max(1, max(len(r) for r in responses))
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    index = torch.zeros(len(prompts), r_max, dtype=torch.long)
    mask = torch.zeros(len(prompts), r_max)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        ids[i, : lengths[i]] = torch.tensor(p + r)
        index[i, : len(r)] = torch.arange(len(p) - 1, len(p) - 1 + len(r))
        mask[i, : len(r)] = 1.0
    ids, index, mask = ids.to(device), index.to(device), mask.to(device)
    logits = model(ids).float() / temperature
    targets = ids.gather(1, (index + 1).clamp(max=width - 1))
    picked = logits.gather(1, index[..., None].expand(-1, -1, logits.shape[-1]))
    lp = picked.gather(2, targets[..., None])[..., 0] - torch.logsumexp(picked, dim=-1)
    return lp * mask, mask


def padded_plan(lengths: list[int], world: int, budget: int) -> list[list[list[int]]]:
    """Rows r, r+W, ... to rank r, packed while longest x rows fits `budget`."""
    plans = []
    for r in range(world):
        mbs: list[list[int]] = []
        longest = 0
        for i in range(r, len(lengths), world):
            n = lengths[i]
            if mbs and max(longest, n) * (len(mbs[-1]) + 1) <= budget:
                mbs[-1].append(i)
                longest = max(longest, n)
            else:
                mbs.append([i])
                longest = n
        plans.append(mbs)
    return plans
