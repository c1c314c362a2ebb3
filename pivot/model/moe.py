"""Sparse mixture-of-experts feed-forward block (Qwen3-MoE, Qwen3.5-MoE), in the folder's layout.

Parameters keep the names the checkpoint has, so it loads and saves without renaming:
`mlp.gate.weight` is the router, and the experts are either per expert
(`mlp.experts.{e}.gate_proj/up_proj/down_proj.weight`, each an ordinary `MLP`: Qwen3-30B-A3B on
the hub) or fused (`mlp.experts.gate_up_proj` [E, 2I, H], gate rows first, and
`mlp.experts.down_proj` [E, H, I], no `.weight` suffix: Qwen3.5-122B-A10B on the hub, and
transformers 5's `Qwen3_5MoeExperts`). `ModelArgs.fused_experts` says which.

Tensor parallelism slices every expert (not expert-parallel): each TP rank holds a column
slice of every expert's gate/up and the matching row slice of its down projection, the
router is replicated, so every rank routes identically and the block's output is one
all-reduce, exactly like a dense MLP (`pivot.model.tp_plan` needs no MoE case).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pivot.model.args import ModelArgs
from pivot.model.layers import make_linear
from pivot.model.mlp import MLP


class FusedExperts(nn.Module):
    """Every expert's SwiGLU in two 3-D tensors; under TP each holds this rank's intermediate
    columns (gate half and up half each sliced, see `pivot.model.tp_plan.split_view`)."""

    def __init__(self, experts: int, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.gate_up_proj = nn.Parameter(torch.empty(experts, 2 * intermediate, hidden))
        self.down_proj = nn.Parameter(torch.empty(experts, hidden, intermediate))
        for p in (
            self.parameters()
        ):  # nn.Linear's default bound per expert (1/sqrt(fan_in)): a fresh model is usable
            bound = p.shape[-1] ** -0.5
            nn.init.uniform_(p, -bound, bound)

    def __len__(self) -> int:
        return self.gate_up_proj.shape[0]

    def run(self, expert: int, x: torch.Tensor) -> torch.Tensor:
        gate, up = F.linear(x, self.gate_up_proj[expert]).chunk(2, dim=-1)
        return F.linear(F.silu(gate) * up, self.down_proj[expert])


class SparseMoeBlock(nn.Module):
    def __init__(self, args: ModelArgs, linear: str) -> None:
        super().__init__()
        self.top_k, self.norm_topk_prob = args.num_experts_per_tok, args.norm_topk_prob
        self.gate = make_linear(args.hidden_size, args.num_experts, False, linear)
        if args.fused_experts:
            self.experts: FusedExperts | nn.ModuleList = FusedExperts(
                args.num_experts, args.hidden_size, args.moe_intermediate_size
            )
        else:
            self.experts = nn.ModuleList(
                MLP(args.hidden_size, args.moe_intermediate_size, linear)
                for _ in range(args.num_experts)
            )
        if (
            args.shared_expert_intermediate_size
        ):  # Qwen3.5: every token also passes a gated shared expert
            self.shared_expert = MLP(args.hidden_size, args.shared_expert_intermediate_size, linear)
            self.shared_expert_gate = make_linear(args.hidden_size, 1, False, linear)

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x: [N, H] -> (weights [N, k] in x's dtype, expert ids [N, k]); softmax then top-k."""
        probs = torch.softmax(self.gate(x).float(), dim=-1)
        weights, experts = probs.topk(self.top_k, dim=-1)
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights.to(x.dtype), experts

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        weights, experts = self.route(flat)
        # group the (token, slot) pairs by expert: one sort and one host sync per layer
        slots = experts.flatten().argsort(stable=True)
        counts = torch.bincount(experts.flatten(), minlength=len(self.experts)).tolist()
        flat_weights = weights.flatten()
        out = torch.zeros_like(flat)
        # under autograd every expert runs, even on no tokens, so each has a (zero) gradient and
        # FSDP's reduce-scatter sees the same parameters on every rank
        keep_empty = torch.is_grad_enabled()
        bank = self.experts
        for e, chosen in enumerate(slots.split(counts)):
            if not len(chosen) and not keep_empty:
                continue
            tokens = chosen // self.top_k
            y = (
                bank.run(e, flat[tokens])
                if isinstance(bank, FusedExperts)
                else bank[e](flat[tokens])
            )
            y = y * flat_weights[chosen, None]
            out.index_add_(0, tokens, y)
        if hasattr(self, "shared_expert"):
            out = out + torch.sigmoid(self.shared_expert_gate(flat)) * self.shared_expert(flat)
        return out.view(shape)
