"""Per-token log-probs of responses given prompts, and token-budget micro-batch packing."""

from __future__ import annotations

import torch
from torch import nn


def response_logprobs(
    model: nn.Module,
    prompts: list[list[int]],
    responses: list[list[int]],
    temperature: float = 1.0,
    device: torch.device | str = "cpu",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded [n, R] log-probs of each response token given its prompt (under
    logits / temperature, as the engine reports them), and the 0/1 mask of real tokens."""
    lengths = [len(p) + len(r) for p, r in zip(prompts, responses)]
    width, r_max = max(lengths), max(1, max(len(r) for r in responses))
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    index = torch.zeros(len(prompts), r_max, dtype=torch.long)
    mask = torch.zeros(len(prompts), r_max)
    for i, (p, r) in enumerate(zip(prompts, responses)):
        ids[i, : lengths[i]] = torch.tensor(p + r)
        # logits at position t predict token t + 1: response token j sits at len(p) + j
        index[i, : len(r)] = torch.arange(len(p) - 1, len(p) - 1 + len(r))
        mask[i, : len(r)] = 1.0
    ids, index, mask = ids.to(device), index.to(device), mask.to(device)
    logits = model(ids).float() / temperature
    targets = ids.gather(1, (index + 1).clamp(max=width - 1))
    picked = logits.gather(1, index[..., None].expand(-1, -1, logits.shape[-1]))
    lp = picked.gather(2, targets[..., None])[..., 0] - torch.logsumexp(picked, dim=-1)
    return lp * mask, mask


def plan_micro_batches(lengths: list[int], world: int, budget: int) -> list[list[list[int]]]:
    """Rows r, r+W, ... go to rank r; each rank packs its rows in order into micro-batches whose
    padded size (longest row x rows) stays within `budget` tokens (a longer row goes alone).
    Returns, per rank, its micro-batches as lists of row indices."""
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
