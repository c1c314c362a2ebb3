"""Tensor parallelism applied from outside the model, following `pivot.model.tp_plan`.

Column-parallel q/k/v/gate/up and row-parallel o/down keep their HF names and only hold
this rank's shard; attention and feed-forward outputs are all-reduced by forward hooks (an
MoE block slices every expert, see `pivot.model.moe`, so it reduces once like a dense MLP);
the embedding and lm_head are vocabulary-parallel (masked lookup + all-reduce, all-gathered
logits). The group is passed in explicitly (gloo on CPU, NCCL on GPU).
"""
from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from pivot.model import CausalLM
from pivot.model.tp_plan import shard_range, tp_split


def shard_tensor(name: str, full: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """This rank's slice of HF tensor `name` (a view of `full`)."""
    dim = tp_split(name).dim
    if world == 1 or dim is None:
        return full
    try:
        start, stop = shard_range(full.shape[dim], rank, world)
    except ValueError as e:
        raise ValueError(f"tensor {name!r}: {e}") from e
    return full.narrow(dim, start, stop - start)


class VocabParallelEmbedding(nn.Module):
    def __init__(self, weight: nn.Parameter, vocab_start: int, group: dist.ProcessGroup) -> None:
        super().__init__()
        self.weight = weight
        self.vocab_start, self.group = vocab_start, group

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        local = ids - self.vocab_start
        outside = (local < 0) | (local >= self.weight.shape[0])
        x = F.embedding(local.masked_fill(outside, 0), self.weight)
        x = x.masked_fill(outside[..., None], 0)
        dist.all_reduce(x, group=self.group)
        return x


class VocabParallelHead(nn.Module):
    def __init__(self, weight: nn.Parameter, group: dist.ProcessGroup) -> None:
        super().__init__()
        self.weight, self.group = weight, group

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        local = F.linear(x, self.weight).contiguous()
        parts = [torch.empty_like(local) for _ in range(dist.get_world_size(self.group))]
        dist.all_gather(parts, local, group=self.group)
        return torch.cat(parts, dim=-1)


def _all_reduce_hook(group: dist.ProcessGroup):
    def hook(module: nn.Module, inputs: tuple, output: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(output, group=group)
        return output

    return hook


def shard_model(model: CausalLM, group: dist.ProcessGroup) -> None:
    """Shard `model` in place for this rank of `group`."""
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    args = model.args
    if args.glm_layout:
        raise ValueError(
            f"model family {args.family!r}: its fused gate_up_proj has no tensor-parallel split; use TP size 1"
        )
    fields = ["num_attention_heads", "num_key_value_heads", "intermediate_size", "vocab_size"]
    for field in fields + (["moe_intermediate_size"] if args.num_experts else []):
        if getattr(args, field) % world:
            raise ValueError(f"model {field}={getattr(args, field)} does not divide over TP size {world}")
    tied = args.tie_word_embeddings
    for name, module in list(model.named_modules()):
        for pname, param in list(module.named_parameters(recurse=False)):
            full_name = f"{name}.{pname}" if name else pname
            shard = shard_tensor(full_name, param.data, rank, world)
            if shard is not param.data:
                setattr(module, pname, nn.Parameter(shard.contiguous().clone(), requires_grad=False))
    for layer in model.model.layers:
        layer.mlp.register_forward_hook(_all_reduce_hook(group))
        if not hasattr(layer, "self_attn"):  # linear attention: replicated whole on every rank
            continue
        layer.self_attn.n_heads = args.num_attention_heads // world
        layer.self_attn.n_kv_heads = args.num_key_value_heads // world
        layer.self_attn.o_proj.register_forward_hook(_all_reduce_hook(group))
    emb = model.model.embed_tokens.weight
    start, _ = shard_range(args.vocab_size, rank, world)
    model.model.embed_tokens = VocabParallelEmbedding(emb, start, group)
    model.lm_head = VocabParallelHead(emb if tied else model.lm_head.weight, group)


def gather_tensor(name: str, local: torch.Tensor, group: dist.ProcessGroup | None) -> torch.Tensor:
    """The full HF tensor `name` from every rank's shard (collective under TP)."""
    dim = tp_split(name).dim
    if group is None or dist.get_world_size(group) == 1 or dim is None:
        return local.detach().clone()
    parts = [torch.empty_like(local) for _ in range(dist.get_world_size(group))]
    dist.all_gather(parts, local.detach().contiguous(), group=group)
    return torch.cat(parts, dim=dim)
