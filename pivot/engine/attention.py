"""Paged-KV attention plugged into the model's `attn(layer_idx, q, k, v)` hook.

The model runner packs every scheduled token of a step into one row (B=1, T=N). Per layer
the backend writes the new K/V into the cache at each token's slot, then attends each query
to its own sequence's cached context: with torch SDPA over a padded [S, Qmax] x [S, Lmax]
batch (any device), or with flash-attn's paged varlen kernel on CUDA (untested here).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from pivot.engine.linear_state import LinearLayer, LinearStates

try:  # optional GPU kernel, never required on CPU
    from flash_attn import flash_attn_varlen_func  # type: ignore[import-not-found]
except ImportError:
    flash_attn_varlen_func = None


@dataclass
class StepInput:
    """Everything a rank needs to run one step; the TP leader broadcasts it. Plain lists."""

    token_ids: list[int]
    positions: list[int]
    q_lens: list[int]
    """Tokens computed this step, per scheduled sequence."""
    ctx_lens: list[int]
    """Context length after this step (cached + new), per scheduled sequence."""
    block_tables: list[list[int]]
    sample_seqs: list[int]
    """Indices of the sequences whose last token's logits are needed."""
    seq_ids: list[int] = field(default_factory=list)
    """Request id of each scheduled sequence (keys of linear-attention state)."""
    dropped: list[int] = field(default_factory=list)
    """Sequences finished or aborted since the last step: their linear-attention state goes."""


class KVCache:
    """K and V of each attention layer, shape [num_blocks * block_size, Hkv, D] (flat slots).

    Only `attention_layers` get a cache (a hybrid's linear-attention layers keep recurrent state
    instead); `index[layer_idx]` is the layer's row in `k` and `v`.
    """

    def __init__(
        self, attention_layers: list[int], num_blocks: int, block_size: int, n_kv_heads: int, head_dim: int,
        dtype: torch.dtype, device: torch.device | str,
    ) -> None:
        shape = (len(attention_layers), num_blocks * block_size, n_kv_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.index = {layer: i for i, layer in enumerate(attention_layers)}
        self.num_blocks, self.block_size = num_blocks, block_size


class PagedAttention:
    """Per-step attention backend; build with `PagedAttention(cache, step, kernel, device)`."""

    def __init__(
        self, cache: KVCache, step: StepInput, kernel: str, device: torch.device | str,
        linear_states: LinearStates | None = None,
    ) -> None:
        self.cache, self.kernel, self.step, self.linear_states = cache, kernel, step, linear_states
        bs = cache.block_size
        s = len(step.q_lens)
        q_lens = torch.tensor(step.q_lens, dtype=torch.long)
        ctx = torch.tensor(step.ctx_lens, dtype=torch.long)
        max_blocks = max(len(t) for t in step.block_tables)
        tables = torch.tensor([t + [0] * (max_blocks - len(t)) for t in step.block_tables], dtype=torch.long)
        cu_q = torch.zeros(s + 1, dtype=torch.long)
        cu_q[1:] = q_lens.cumsum(0)
        n = int(cu_q[-1])
        seq_of_tok = torch.repeat_interleave(torch.arange(s), q_lens)
        pos = torch.tensor(step.positions, dtype=torch.long)
        self.slot_mapping = (tables[seq_of_tok, pos // bs] * bs + pos % bs).to(device)
        if kernel == "flash":
            cu_k = torch.zeros(s + 1, dtype=torch.int32)
            cu_k[1:] = ctx.cumsum(0)
            self.cu_q = cu_q.to(torch.int32).to(device)
            self.cu_k = cu_k.to(device)
            self.max_q, self.max_k = int(q_lens.max()), int(ctx.max())
            self.block_table = tables.to(torch.int32).to(device)
            return
        # keys are gathered a whole block at a time (one contiguous row per block: far cheaper
        # than per-token indexing), so each sequence's key axis is max_blocks * block_size long
        q_max, l_max = int(q_lens.max()), max_blocks * bs
        i = torch.arange(q_max)
        j = torch.arange(l_max)
        self.decode_only = q_max == 1  # packed rows are already one per sequence: no re-packing
        self.q_index = (cu_q[:-1, None] + i).clamp(max=n - 1).to(device)  # [S, Qmax] into packed rows
        self.out_index = (seq_of_tok * q_max + torch.arange(n) - cu_q[seq_of_tok]).to(device)
        self.block_ids = tables.flatten().to(device)  # padding entries point at block 0, masked
        self.num_seqs = s
        # query i of sequence s sits at position ctx - q_len + i and sees keys up to it
        last = (ctx - q_lens)[:, None] + i  # [S, Qmax]
        self.mask = ((j[None, None] <= last[:, :, None]) & (j[None, None] < ctx[:, None, None]))[:, None].to(device)

    def __call__(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        row = self.cache.index[layer_idx]
        kc, vc = self.cache.k[row], self.cache.v[row]
        kc.index_copy_(0, self.slot_mapping, k[0].to(kc.dtype))
        vc.index_copy_(0, self.slot_mapping, v[0].to(vc.dtype))
        if self.kernel == "flash":
            return self._flash(q, kc, vc)
        qp = q[0][:, None] if self.decode_only else q[0][self.q_index]  # [S, Qmax, Hq, D]
        bs = self.cache.block_size
        kk = kc.view(-1, bs * kc.shape[1] * kc.shape[2]).index_select(0, self.block_ids).view(self.num_seqs, -1, *kc.shape[1:])
        vv = vc.view(-1, bs * vc.shape[1] * vc.shape[2]).index_select(0, self.block_ids).view(self.num_seqs, -1, *vc.shape[1:])
        out = F.scaled_dot_product_attention(
            qp.transpose(1, 2), kk.transpose(1, 2).to(qp.dtype), vv.transpose(1, 2).to(qp.dtype),
            attn_mask=self.mask, enable_gqa=True,
        )  # [S, Hq, Qmax, D]
        out = out.transpose(1, 2).reshape(-1, q.shape[2], q.shape[3])
        if not self.decode_only:
            out = out[self.out_index]
        return out[None]

    def linear_attention(self, layer_idx: int, layer: LinearLayer, x: torch.Tensor) -> torch.Tensor:
        """A linear-attention layer over the packed step, each sequence continuing its own state."""
        if self.linear_states is None:
            raise RuntimeError("this engine keeps no linear-attention state")
        st = self.step
        starts = [c - q for c, q in zip(st.ctx_lens, st.q_lens)]
        return self.linear_states.run(layer_idx, layer, x, st.seq_ids, starts, st.q_lens)

    def _flash(self, q: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor) -> torch.Tensor:
        if flash_attn_varlen_func is None:
            raise RuntimeError("EngineConfig.attention='flash' but flash_attn is not installed")
        bs = self.cache.block_size
        out = flash_attn_varlen_func(
            q[0], kc.view(-1, bs, *kc.shape[1:]), vc.view(-1, bs, *vc.shape[1:]),
            self.cu_q, self.cu_k, self.max_q, self.max_k, causal=True, block_table=self.block_table,
        )
        return out[None]
