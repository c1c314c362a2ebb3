"""Paged-KV attention plugged into the model's `attn(layer_idx, q, k, v)` hook.

The model runner packs every scheduled token of a step into one row (B=1, T=N). Per layer
the backend writes the new K/V into the cache at each token's slot, then attends each query
to its own sequence's cached context. Three kernels (`PAGED_KERNELS`, chosen by
`EngineConfig.attention`):
- "flex": torch's FlexAttention over the cache in place (pivot/engine/flex_paged.py): each
  query reads its sequence's blocks where they lie; nothing K/V-sized is created. CPU (compiled
  by inductor) and CUDA (Triton).
- "flash": flash-attn's paged varlen kernel, CUDA only, when installed (never run here).
- "gather": the reference. The sequences are grouped by context length (decoding and
  prefilling sequences apart) and each group gathers its keys a whole block at a time into a
  dense copy, padded to the group's longest context, then runs SDPA with an additive mask: it
  creates and re-reads about the live K/V's bytes every layer of every step, which is why it is
  the reference the tests compare the others against, not a serving path.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask

from pivot.engine.flex_paged import FlexTables, PrefillPlan, decode
from pivot.engine.linear_state import LinearLayer, LinearStates

try:  # optional GPU kernel, never required on CPU
    from flash_attn import flash_attn_varlen_func
except ImportError:
    flash_attn_varlen_func = None

PAGED_KERNELS = ("flex", "flash", "gather")

SPLIT_RATIO = 2
"""A group's longest context is at most this times its shortest (in blocks) ..."""
SPLIT_MIN_BLOCKS = 4
"""... unless they differ by fewer blocks than this: smaller groups cost more calls than padding."""


@dataclass
class StepInput:
    """Everything a rank needs to run one step; the TP leader broadcasts it. 1-D int64 tensors."""

    token_ids: torch.Tensor
    """[N] the tokens computed this step, packed sequence after sequence."""
    q_lens: torch.Tensor
    """[S] tokens computed this step, per scheduled sequence."""
    ctx_lens: torch.Tensor
    """[S] context length after this step (cached + new), per scheduled sequence."""
    block_ids: torch.Tensor
    """Each sequence's block table (ceil(ctx / block_size) blocks), concatenated."""
    sample_rows: torch.Tensor
    """Packed rows whose logits are needed (each sampling sequence's last token)."""
    copies: torch.Tensor
    """[2C] (source, destination) block pairs to copy before the step (copy-on-write)."""
    seq_ids: torch.Tensor
    """[S] request id of each scheduled sequence (keys of linear-attention state)."""
    dropped: torch.Tensor
    """Sequences finished or aborted since the last step: their linear-attention state goes."""

    def pack(self) -> torch.Tensor:
        """One tensor: the field lengths, then the fields (for a single broadcast)."""
        parts = [getattr(self, f.name) for f in fields(self)]
        return torch.cat([torch.tensor([len(p) for p in parts]), *parts])

    @classmethod
    def unpack(cls, packed: torch.Tensor) -> StepInput:
        n = len(fields(cls))
        lens = packed[:n].tolist()
        return cls(*torch.split(packed[n:], lens))


class KVCache:
    """K and V of each attention layer, shape [(num_blocks + 1) * block_size, Hkv, D] (flat slots).

    Only `attention_layers` get a cache (a hybrid's linear-attention layers keep recurrent state
    instead); `index[layer_idx]` is the layer's row in `k` and `v`. The block past the last,
    `scratch_block`, belongs to no sequence: a graphed decode step's padding rows write there.
    """

    def __init__(
        self,
        attention_layers: list[int],
        num_blocks: int,
        block_size: int,
        n_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        shape = (len(attention_layers), (num_blocks + 1) * block_size, n_kv_heads, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)
        self.index = {layer: i for i, layer in enumerate(attention_layers)}
        self.num_blocks, self.block_size = num_blocks, block_size
        self.scratch_block = num_blocks

    def write(
        self, layer_idx: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """A layer's new K/V [1, N, Hkv, D] into their slots; returns the layer's whole K and V."""
        row = self.index[layer_idx]
        kc, vc = self.k[row], self.v[row]
        kc.index_copy_(0, slots, k[0].to(kc.dtype))
        vc.index_copy_(0, slots, v[0].to(vc.dtype))
        return kc, vc

    def copy_blocks(self, pairs: torch.Tensor) -> None:
        """Copy whole blocks in every attention layer's cache: `pairs` is [2C] (source, destination, ...)."""
        if not len(pairs):
            return
        src, dst = pairs.view(-1, 2).to(self.k.device).unbind(1)
        for c in (self.k, self.v):
            blocks = c.view(c.shape[0], self.num_blocks + 1, -1)
            blocks.index_copy_(1, dst, blocks.index_select(1, src))


@dataclass
class _Group:
    """Sequences attended together, padded to the group's longest query and context."""

    q_rows: torch.Tensor
    """[G * Qmax] packed rows of the queries (padding repeats a valid row)."""
    block_ids: torch.Tensor
    """[G * blocks] key blocks (padding points at block 0, masked)."""
    mask: torch.Tensor
    """[G, 1, Qmax, blocks * block_size] additive: 0 where a query sees a key, -inf elsewhere."""
    out_pick: torch.Tensor | None
    """Entries of the [G * Qmax] outputs that are real queries (None: all are)."""
    out_rows: torch.Tensor
    """Packed rows those outputs go to."""
    every_row: bool = False
    """The group is every packed row, in order: no gathering of queries nor scattering of outputs."""
    _per_head: dict[int, torch.Tensor] = field(default_factory=dict)

    def mask_for(self, q_per_kv: int) -> torch.Tensor:
        """The mask for queries laid out as [Qmax * q_per_kv] (each query once per head it serves)."""
        if self.mask.shape[2] == 1:  # one query: broadcasts over the heads
            return self.mask
        if q_per_kv not in self._per_head:
            self._per_head[q_per_kv] = self.mask.repeat_interleave(q_per_kv, dim=2)
        return self._per_head[q_per_kv]


class PagedAttention:
    """Per-step attention backend; build with `PagedAttention(cache, step, kernel, device)`,
    `flex` (the engine's `FlexTables`) for the "flex" kernel, and `linear_states` for a model
    with linear-attention layers (`linear_attention`).

    `positions` holds each packed token's position (the model's RoPE input). The query heads
    sharing a K/V head read it together (GQA without repeating K/V)."""

    def __init__(
        self,
        cache: KVCache,
        step: StepInput,
        kernel: str,
        device: torch.device | str,
        linear_states: LinearStates | None = None,
        flex: FlexTables | None = None,
    ) -> None:
        if kernel not in PAGED_KERNELS:
            raise ValueError(f"paged attention kernel {kernel!r} is not one of {PAGED_KERNELS}")
        self.cache, self.kernel, self.step, self.linear_states = cache, kernel, step, linear_states
        self._segments: tuple[list[int], list[int], list[int]] | None = None
        bs = cache.block_size
        q_lens, ctx = step.q_lens.cpu(), step.ctx_lens.cpu()
        block_ids = step.block_ids.cpu()
        s = len(q_lens)
        cu_q = torch.zeros(s + 1, dtype=torch.long)
        cu_q[1:] = q_lens.cumsum(0)
        n = int(cu_q[-1])
        self.num_tokens = n
        if n == s:  # decoding only: one token per sequence
            seq_of_tok, pos = torch.arange(s), ctx - 1
        else:
            seq_of_tok = torch.repeat_interleave(torch.arange(s), q_lens, output_size=n)
            pos = (ctx - q_lens - cu_q[:-1])[seq_of_tok] + torch.arange(n)
        n_blocks = -(-ctx // bs)
        tables = block_tables(ctx, block_ids, bs, int(n_blocks.max()), 0)
        self.positions = pos.to(device)
        self.slot_mapping = (tables[seq_of_tok, pos // bs] * bs + pos % bs).to(device)
        if kernel == "flash":
            cu_k = torch.zeros(s + 1, dtype=torch.int32)
            cu_k[1:] = ctx.cumsum(0)
            self.cu_q = cu_q.to(torch.int32).to(device)
            self.cu_k = cu_k.to(device)
            self.max_q, self.max_k = int(q_lens.max()), int(ctx.max())
            self.block_table = tables.to(torch.int32).to(device)
        elif kernel == "flex":
            if flex is None:
                raise ValueError("the flex kernel needs the engine's FlexTables")
            self._flex_plan(q_lens, ctx, tables, cu_q, flex, device)
        else:
            self._gather_plan(q_lens, ctx, tables, cu_q, n_blocks, device)

    def _flex_plan(
        self,
        q_lens: torch.Tensor,
        ctx: torch.Tensor,
        tables: torch.Tensor,
        cu_q: torch.Tensor,
        flex: FlexTables,
        device: torch.device | str,
    ) -> None:
        """Decoding sequences as a batch of one-query rows, prefilling ones packed in tiles."""
        decoding = q_lens == 1
        dec, pre = decoding.nonzero()[:, 0], (~decoding).nonzero()[:, 0]
        self.all_decode = len(dec) == self.num_tokens
        self.dec_rows = cu_q[dec].to(device)
        self.dec_mask: BlockMask | None = None
        self.prefill: PrefillPlan | None = None
        if len(dec):
            flex.fill(ctx[dec], tables[dec], len(dec))
            self.dec_mask = flex.mask(len(dec), self.cache.k.shape[1])
        if len(pre):
            self.prefill = plan = PrefillPlan(q_lens[pre], ctx[pre], tables[pre], cu_q[pre], flex)
            self.pre_rows = plan.rows.index_select(0, plan.real)  # where its outputs go

    def _gather_plan(
        self,
        q_lens: torch.Tensor,
        ctx: torch.Tensor,
        tables: torch.Tensor,
        cu_q: torch.Tensor,
        n_blocks: torch.Tensor,
        device: torch.device | str,
    ) -> None:
        bs, dtype, n = self.cache.block_size, self.cache.k.dtype, self.num_tokens
        self.groups = []
        for rows, width, decoding in _partition(q_lens, n_blocks):
            keys = torch.arange(width * bs)
            ids = tables[rows, :width].flatten().to(device)
            if decoding:
                q_rows = cu_q[rows].to(device)
                seen = keys < ctx[rows, None]
                mask = _additive(seen[:, None, None], dtype, device)
                self.groups.append(
                    _Group(q_rows, ids, mask, None, q_rows, every_row=len(rows) == n)
                )
                continue
            ql = q_lens[rows]
            i = torch.arange(int(ql.max()))
            real = (i < ql[:, None]).flatten()
            i = torch.minimum(i, ql[:, None] - 1)  # padding repeats the last query
            q_rows = (cu_q[rows, None] + i).flatten()
            # query i sits at position ctx - q_len + i and sees the keys up to it
            seen = keys <= ((ctx[rows] - ql)[:, None] + i)[:, :, None]
            pick = real.nonzero()[:, 0]
            self.groups.append(
                _Group(
                    q_rows.to(device),
                    ids,
                    _additive(seen[:, None], dtype, device),
                    pick.to(device),
                    q_rows[pick].to(device),
                )
            )

    def __call__(
        self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        kc, vc = self.cache.write(layer_idx, self.slot_mapping, k, v)
        if self.kernel == "flash":
            return self._flash(q, kc, vc)
        if self.kernel == "flex":
            return self._flex(q[0], kc, vc)[None]
        q0 = q[0]
        heads, dim, kv_heads = q0.shape[1], q0.shape[2], kc.shape[1]
        rep = heads // kv_heads
        kb = kc.view(-1, self.cache.block_size * kv_heads * dim)  # one row per block
        vb = vc.view(-1, self.cache.block_size * kv_heads * dim)
        out = None if self.groups[0].every_row else q0.new_empty(self.num_tokens, heads, dim)
        for g in self.groups:
            size = g.mask.shape[0]
            qg = q0 if g.every_row else q0.index_select(0, g.q_rows)
            # [G, Qmax, Hkv, rep, D] -> [G, Hkv, Qmax * rep, D]
            qg = (
                qg.view(size, -1, kv_heads, rep, dim)
                .transpose(1, 2)
                .reshape(size, kv_heads, -1, dim)
            )
            kk = (
                kb.index_select(0, g.block_ids)
                .view(size, -1, kv_heads, dim)
                .transpose(1, 2)
                .to(q0.dtype)
            )
            vv = (
                vb.index_select(0, g.block_ids)
                .view(size, -1, kv_heads, dim)
                .transpose(1, 2)
                .to(q0.dtype)
            )
            o = F.scaled_dot_product_attention(qg, kk, vv, attn_mask=g.mask_for(rep).to(q0.dtype))
            o = o.view(size, kv_heads, -1, rep, dim).transpose(1, 2).reshape(-1, heads, dim)
            if g.every_row:
                return o[None]
            if g.out_pick is not None:
                o = o.index_select(0, g.out_pick)
            if out is None:  # None only where the first group is every row, returned above
                raise RuntimeError("attention: a group of packed rows after a whole-step group")
            out.index_copy_(0, g.out_rows, o)
        if out is None:
            raise RuntimeError("attention: no group of rows in the step")
        return out[None]

    def _flex(self, q: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor) -> torch.Tensor:
        if self.all_decode:
            return decode(q, kc, vc, self.dec_mask)
        out = q.new_empty(q.shape)
        if self.dec_mask is not None:
            o = decode(q.index_select(0, self.dec_rows), kc, vc, self.dec_mask)
            out.index_copy_(0, self.dec_rows, o)
        if self.prefill is not None:
            out.index_copy_(0, self.pre_rows, self.prefill(q, kc, vc))
        return out

    def linear_attention(self, layer_idx: int, layer: LinearLayer, x: torch.Tensor) -> torch.Tensor:
        """A linear-attention layer over the packed step, each sequence continuing its own state."""
        if self.linear_states is None:
            raise RuntimeError("this engine keeps no linear-attention state")
        if self._segments is None:  # the same for every layer of the step
            st = self.step
            self._segments = (
                st.seq_ids.tolist(),
                (st.ctx_lens - st.q_lens).tolist(),
                st.q_lens.tolist(),
            )
        return self.linear_states.run(layer_idx, layer, x, *self._segments)

    def _flash(self, q: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor) -> torch.Tensor:
        if flash_attn_varlen_func is None:
            raise RuntimeError("ModelConfig.attention='flash' but flash_attn is not installed")
        bs = self.cache.block_size
        out = flash_attn_varlen_func(
            q[0],
            kc.view(-1, bs, *kc.shape[1:]),
            vc.view(-1, bs, *vc.shape[1:]),
            self.cu_q,
            self.cu_k,
            self.max_q,
            self.max_k,
            causal=True,
            block_table=self.block_table,
        )
        return out[None]


def block_tables(
    ctx: torch.Tensor, block_ids: torch.Tensor, block_size: int, width: int, fill: int
) -> torch.Tensor:
    """[S, width] block tables: each sequence's ceil(ctx / block_size) blocks, taken in turn from
    the concatenated `block_ids` (`StepInput.block_ids`), then `fill`."""
    n_blocks = -(-ctx // block_size)
    first = torch.zeros_like(n_blocks)
    first[1:] = n_blocks.cumsum(0)[:-1]
    j = torch.arange(width)
    picked = block_ids[(first[:, None] + j).clamp(max=len(block_ids) - 1)]
    return torch.where(j < n_blocks[:, None], picked, fill)


def _additive(seen: torch.Tensor, dtype: torch.dtype, device: torch.device | str) -> torch.Tensor:
    return torch.zeros(seen.shape, dtype=dtype).masked_fill_(~seen, float("-inf")).to(device)


def _partition(
    q_lens: torch.Tensor, n_blocks: torch.Tensor
) -> list[tuple[torch.Tensor, int, bool]]:
    """(sequence indices, their most blocks, decoding) per group: decoding sequences apart from
    prefilling ones, each kind cut by context length."""
    groups = []
    decoding = q_lens == 1
    for kind, is_decoding in ((decoding, True), (~decoding, False)):
        rows = kind.nonzero()[:, 0]
        if not len(rows):
            continue
        order = torch.argsort(n_blocks[rows], stable=True)
        sizes = n_blocks[rows[order]].tolist()
        start = 0
        for i, nb in enumerate(sizes):
            if nb > SPLIT_RATIO * sizes[start] and nb - sizes[start] >= SPLIT_MIN_BLOCKS:
                groups.append((rows[order[start:i]], sizes[i - 1], is_decoding))
                start = i
        # one group keeps the packed order (a lone decoding group then needs no re-packing)
        groups.append((rows[order[start:]] if start else rows, sizes[-1], is_decoding))
    return groups
