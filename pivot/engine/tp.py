"""Tensor parallelism applied from outside the model, following `pivot.model.tp_plan`.

Column-parallel q/k/v/gate/up and row-parallel o/down keep their HF names and only hold
this rank's shard; attention and feed-forward outputs are all-reduced by forward hooks (an
MoE block slices every expert, see `pivot.model.moe`, so it reduces once like a dense MLP);
linear-attention layers split by heads like attention; fused experts split their intermediate
dimension (`tp_plan.split_view`: gate and up halves each sliced); fused tensors (GLM-4's gate_up_proj,
the linear attention's q|k|v) give each rank a slice of every section;
the embedding and lm_head are vocabulary-parallel (masked lookup + all-reduce, all-gathered
logits). The group is passed in explicitly (gloo on CPU, NCCL on GPU).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from pivot.model import CausalLM, ModelArgs
from pivot.model.tp_plan import merge_view, shard_range, split_view, tp_split
from pivot.model.transformer import DecoderLayer


def fused_sections(name: str, args: ModelArgs) -> tuple[int, ...] | None:
    """Dim-0 sections of a tensor that concatenates several column-parallel outputs, else None."""
    if name.endswith("mlp.gate_up_proj.weight"):
        return (args.intermediate_size, args.intermediate_size)
    if name.endswith(("linear_attn.in_proj_qkv.weight", "linear_attn.conv1d.weight")):
        kd = args.linear_num_key_heads * args.linear_key_head_dim
        return (kd, kd, args.linear_num_value_heads * args.linear_value_head_dim)
    return None


def _range(name: str, size: int, rank: int, world: int) -> tuple[int, int]:
    try:
        return shard_range(size, rank, world)
    except ValueError as e:
        raise ValueError(f"tensor {name!r}: {e}") from e


def shard_tensor(
    name: str, full: torch.Tensor, rank: int, world: int, sections: tuple[int, ...] | None = None
) -> torch.Tensor:
    """This rank's slice of HF tensor `name` (a view of `full`; a copy for fused `sections`)."""
    if world == 1:
        return full
    if sections is not None:
        parts = []
        for part in full.split(list(sections)):
            start, stop = _range(name, part.shape[0], rank, world)
            parts.append(part[start:stop])
        return torch.cat(parts)
    dim = tp_split(name).dim
    if dim is None:
        return full
    view = split_view(name, tuple(full.shape))  # fused experts' gate_up: a slice of each half
    start, stop = _range(name, view[dim], rank, world)
    local = full.view(view).narrow(dim, start, stop - start)
    return local if len(view) == full.dim() else local.reshape(merge_view(name, tuple(local.shape)))


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
    fields = ["num_attention_heads", "num_key_value_heads", "intermediate_size", "vocab_size"]
    fields += (
        ["moe_intermediate_size", "shared_expert_intermediate_size"] if args.num_experts else []
    )
    fields += (
        ["linear_num_key_heads", "linear_num_value_heads"] if args.has_linear_attention else []
    )
    for field in fields:
        if getattr(args, field) % world:
            raise ValueError(
                f"model {field}={getattr(args, field)} does not divide over TP size {world}"
            )
    tied = args.tie_word_embeddings
    for name, module in list(model.named_modules()):
        for pname, param in list(module.named_parameters(recurse=False)):
            full_name = f"{name}.{pname}" if name else pname
            shard = shard_tensor(
                full_name, param.data, rank, world, fused_sections(full_name, args)
            )
            if shard is not param.data:
                setattr(
                    module, pname, nn.Parameter(shard.contiguous().clone(), requires_grad=False)
                )
    for layer in model.model.layers:
        if not isinstance(layer, DecoderLayer):
            raise TypeError(f"TP sharding: {type(layer).__name__} is not a DecoderLayer")
        layer.mlp.register_forward_hook(_all_reduce_hook(group))
        if hasattr(layer, "linear_attn"):  # split by heads like attention
            layer.linear_attn.n_k_heads = args.linear_num_key_heads // world
            layer.linear_attn.n_v_heads = args.linear_num_value_heads // world
            layer.linear_attn.out_proj.register_forward_hook(_all_reduce_hook(group))
            continue
        layer.self_attn.n_heads = args.num_attention_heads // world
        layer.self_attn.n_kv_heads = args.num_key_value_heads // world
        layer.self_attn.o_proj.register_forward_hook(_all_reduce_hook(group))
    emb = model.model.embed_tokens.weight
    head = emb if tied else model.lm_head.weight
    if not isinstance(emb, nn.Parameter) or not isinstance(head, nn.Parameter):
        raise TypeError("TP sharding: the embedding and LM head weights must be Parameters")
    start, _ = shard_range(args.vocab_size, rank, world)
    model.model.embed_tokens = VocabParallelEmbedding(emb, start, group)
    model.lm_head = VocabParallelHead(head, group)


def gather_tensor(
    name: str,
    local: torch.Tensor,
    group: dist.ProcessGroup | None,
    sections: tuple[int, ...] | None = None,
) -> torch.Tensor:
    """The full HF tensor `name` from every rank's shard (collective under TP)."""
    dim = 0 if sections is not None else tp_split(name).dim
    if group is None or dist.get_world_size(group) == 1 or dim is None:
        return local.detach().clone()
    world = dist.get_world_size(group)
    parts = [torch.empty_like(local) for _ in range(world)]
    dist.all_gather(parts, local.detach().contiguous(), group=group)
    if sections is None:
        view = split_view(name, tuple(local.shape))
        if len(view) == local.dim():
            return torch.cat(parts, dim=dim)
        whole = torch.cat([p.view(view) for p in parts], dim=dim)
        return whole.reshape(merge_view(name, tuple(whole.shape)))
    local_sections = [size // world for size in sections]
    per_rank = [p.split(local_sections) for p in parts]  # rank -> its slice of each section
    return torch.cat([torch.cat([r[i] for r in per_rank]) for i in range(len(sections))])
