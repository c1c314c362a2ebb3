"""Per-token log-probs of responses given prompts, on packed micro-batches, and the plan that
packs them by real tokens.

A micro-batch lays its rows end to end in one [1, T] sequence, positions restarting at each row
and attention confined to it (pivot/model/varlen.py): no padding is computed. Only the positions
that predict a response token go through the LM head, a chunk of `chunk_tokens` at a time; each
chunk's fp32 logits are freed before the next and made again in backward (`TokenLogprobs`), so
the logits' peak is one chunk's buffer, not the micro-batch's several: at
Qwen2.5's 152K vocabulary a 16K-token micro-batch's fp32 logits alone are 10 GB, a 1,024-token
chunk's (`train.logprob_chunk_tokens`) 0.6 GB.
The result keeps the layout the loss code reads: [rows, longest response], zero past each row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from pivot.config import TrainConfig
from pivot.model.varlen import VarlenAttention, varlen_kernel


@dataclass(frozen=True)
class PackedRows:
    """Rows laid end to end: what the model reads and where each response token's log-prob
    comes from and goes to."""

    ids: torch.Tensor
    """[1, T] every row's prompt and response, in row order."""
    positions: torch.Tensor
    """[1, T] each token's position within its own row."""
    lengths: list[int]
    """Each row's token count (prompt + response)."""
    picks: torch.Tensor
    """[N] the packed positions whose logits predict a response token (a row's last prompt token
    through its second-to-last response token)."""
    targets: torch.Tensor
    """[N] the response token each pick predicts."""
    rows: torch.Tensor
    cols: torch.Tensor
    """[N] where each pick's log-prob goes in the [rows, longest response] result."""
    width: int
    """The longest response (at least 1)."""


def pack_rows(
    prompts: list[list[int]], responses: list[list[int]], device: torch.device | str
) -> PackedRows:
    ids: list[int] = []
    positions: list[int] = []
    picks: list[int] = []
    rows: list[int] = []
    cols: list[int] = []
    for i, (p, r) in enumerate(zip(prompts, responses)):
        if not p:
            raise ValueError(f"row {i}: an empty prompt leaves no position to predict from")
        start = len(ids)
        ids += p + r
        positions += range(len(p) + len(r))
        # logits at position t predict token t + 1: response token j sits at len(p) + j
        picks += range(start + len(p) - 1, start + len(p) - 1 + len(r))
        rows += [i] * len(r)
        cols += range(len(r))
    id_tensor = torch.tensor(ids, dtype=torch.long, device=device)
    pick_tensor = torch.tensor(picks, dtype=torch.long, device=device)
    return PackedRows(
        ids=id_tensor[None],
        positions=torch.tensor(positions, dtype=torch.long, device=device)[None],
        lengths=[len(p) + len(r) for p, r in zip(prompts, responses)],
        picks=pick_tensor,
        targets=id_tensor[pick_tensor + 1],
        rows=torch.tensor(rows, dtype=torch.long, device=device),
        cols=torch.tensor(cols, dtype=torch.long, device=device),
        width=max(1, max((len(r) for r in responses), default=0)),
    )


class ChunkedLogprobs:
    """An LM head (pivot/model/transformer.py's `head`): the log-prob of each target token at
    the picked positions, under logits / temperature in fp32, a chunk of tokens at a time."""

    def __init__(
        self, picks: torch.Tensor, targets: torch.Tensor, temperature: float, chunk_tokens: int
    ) -> None:
        self.picks, self.targets = picks, targets
        self.temperature, self.chunk = temperature, chunk_tokens

    def __call__(self, hidden: torch.Tensor, lm_head: nn.Module) -> torch.Tensor:
        picked = hidden.reshape(-1, hidden.shape[-1]).index_select(0, self.picks)
        weight = lm_head.weight  # the LM head is bias-free in every family served
        return torch.cat(
            [
                TokenLogprobs.apply(
                    picked[s : s + self.chunk],
                    weight,
                    self.targets[s : s + self.chunk],
                    self.temperature,
                )
                for s in range(0, len(self.picks), self.chunk)
            ]
            or [picked.new_zeros(0, dtype=torch.float32)]
        )


class TokenLogprobs(torch.autograd.Function):
    """log softmax(hidden @ weight.T / temperature)[target] for a chunk of tokens, in fp32, with
    the logits made again in backward rather than kept: the chunk's one fp32 [tokens, vocab]
    buffer becomes the softmax, then the logits' gradient, in place (d lp / d logits = onehot -
    softmax), where autograd through the same formula would hold three or four such buffers."""

    @staticmethod
    def forward(
        ctx: Any,
        hidden: torch.Tensor,
        weight: torch.Tensor,
        targets: torch.Tensor,
        temperature: float,
    ) -> torch.Tensor:
        logits = _scaled_logits(hidden, weight, temperature)
        lse = torch.logsumexp(logits, dim=-1)
        ctx.save_for_backward(hidden, weight, targets, lse)
        ctx.temperature = temperature
        return logits.gather(1, targets[:, None])[:, 0] - lse

    @staticmethod
    def backward(ctx: Any, grad_lp: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        hidden, weight, targets, lse = ctx.saved_tensors
        grad = _scaled_logits(hidden, weight, ctx.temperature)
        grad.sub_(lse[:, None]).exp_().mul_(-grad_lp[:, None])  # - g x softmax
        grad.scatter_add_(1, targets[:, None], grad_lp[:, None])  # + g at the target
        if ctx.temperature != 1.0:
            grad.div_(ctx.temperature)
        grad = grad.to(hidden.dtype)
        grad_hidden = grad @ weight if ctx.needs_input_grad[0] else None
        grad_weight = grad.t() @ hidden if ctx.needs_input_grad[1] else None
        return grad_hidden, grad_weight, None, None


def _scaled_logits(hidden: torch.Tensor, weight: torch.Tensor, temperature: float) -> torch.Tensor:
    """logits / temperature in fp32, as the engine samples from them: in the model's dtype from
    the matmul, then fp32 (one new buffer, scaled in place)."""
    logits = F.linear(hidden, weight)
    logits = logits.float() if logits.dtype != torch.float32 else logits
    return logits.div_(temperature) if temperature != 1.0 else logits


def response_logprobs(
    model: nn.Module,
    prompts: list[list[int]],
    responses: list[list[int]],
    temperature: float = 1.0,
    device: torch.device | str = "cpu",
    chunk_tokens: int = TrainConfig.logprob_chunk_tokens,
) -> tuple[torch.Tensor, torch.Tensor]:
    """[n, R] log-probs of each response token given its prompt (under logits / temperature,
    as the engine reports them), zero past each response, and the 0/1 mask of real tokens.
    `model`: a pivot CausalLM (FSDP-wrapped or not)."""
    packed = pack_rows(prompts, responses, device)
    kernel = varlen_kernel(getattr(model, "attention", "sdpa"), torch.device(device))
    flat = model(
        packed.ids,
        packed.positions,
        attn=VarlenAttention(packed.lengths, kernel, device),
        head=ChunkedLogprobs(packed.picks, packed.targets, temperature, chunk_tokens),
    )
    shape = (len(prompts), packed.width)
    where = (packed.rows, packed.cols)
    lp = torch.zeros(shape, dtype=flat.dtype, device=flat.device).index_put(where, flat)
    mask = torch.zeros(shape, device=flat.device).index_put(where, torch.ones_like(flat))
    return lp, mask


def plan_micro_batches(lengths: list[int], world: int, budget: int) -> list[list[list[int]]]:
    """Rows r, r+W, ... go to rank r; each rank packs its rows in order into micro-batches of at
    most `budget` real tokens (a longer row goes alone). Returns, per rank, its micro-batches as
    lists of row indices."""
    plans = []
    for r in range(world):
        mbs: list[list[int]] = []
        tokens = 0
        for i in range(r, len(lengths), world):
            if mbs and tokens + lengths[i] <= budget:
                mbs[-1].append(i)
                tokens += lengths[i]
            else:
                mbs.append([i])
                tokens = lengths[i]
        plans.append(mbs)
    return plans
