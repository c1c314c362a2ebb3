"""Paged attention on torch's FlexAttention: every query reads its own sequence's K/V where it
lies in the cache, block by block, and nothing K/V-sized is gathered, masked or created.

The cache (`KVCache`, flat slots `[(num_blocks + 1) * block_size, Hkv, D]` per layer) is handed
to `flex_attention` as one batch-1 key and value of every slot, `[1, Hkv, slots, D]` (a view, no
copy); a `BlockMask` built from the block tables tells the kernel which cache blocks each row of
queries visits. The kernel reads only those blocks, so a step's K/V traffic is each live block
once (a decode step) or once per query tile (a prefill chunk), and query heads sharing a K/V head
read it together (`enable_gqa`: no repeated K/V). On CUDA this is torch's own Triton kernel; on
CPU the same call compiles to inductor's C++ flex kernel (`torch.compile`, cached on disk), which
is how the suite runs and counts it.

Two layouts, as flash-attn's decode and varlen kernels have:
- **decode** (one query per sequence): a batch of sequences, each one row of queries. Its blocks
  but the last are "full" (every key visible: the mask function is not evaluated on them); the
  last is "partial", its first `ctx - (n_blocks - 1) * block_size` keys visible. `FlexTables`
  holds the tables in buffers sized once for the engine's largest batch, so a captured graph
  reads them in place; a row keeps its last block in column 0 and its full blocks after it, so
  both kinds are views of one table.
- **prefill** (several queries of a sequence, any mix of lengths): the prefilling sequences'
  queries packed in one row, each sequence padded to a multiple of `Q_TILE` so no tile holds two
  sequences; a tile visits its sequence's blocks up to its last query's, the mask function keeps
  each query's keys at or before its own position (causal, by each block's logical index in
  `FlexTables.logical`, written for the blocks of the sequences prefilled this step).

`flex_attention` asserts on CPU that a block mask's index tables are as wide as the cache has
blocks (torch/_inductor/kernel/flex/flex_cpu.py, "KV seqlen must be smaller than the block_mask
size"), so the tables are `num_blocks + 2` wide; a step writes only the columns it uses.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch.nn.attention.flex_attention import BlockMask, flex_attention
from torch.utils._python_dispatch import _get_current_dispatch_mode

Q_TILE = 128
"""Queries of one prefilling sequence per block-mask row (Triton's flex forward tiles queries by
64 or 128, and needs the mask's query block to be a multiple of its tile)."""


@functools.cache
def _compiled(layout: str) -> Callable[..., torch.Tensor]:
    # A compiled function that meets more shapes than dynamo's recompile limit would otherwise
    # run flex_attention eagerly from then on (its unfused reference, which materialises every
    # score): that must be an error, never a silent fallback. Each layout compiles once per model
    # shape (heads, head size, dtype, block size), then once more when a size first changes
    # (dynamo then makes it symbolic; `dynamic=True` from the start miscompiles the CPU kernel in
    # torch 2.13). Set here, at the first use, so a rank that never runs flex never imports dynamo.
    import torch._dynamo

    torch._dynamo.config.fail_on_recompile_limit_hit = True
    torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
    return torch.compile(flex_attention, dynamic=None)


def compiled_flex(layout: str) -> Callable[..., torch.Tensor]:
    """`flex_attention` compiled for one layout ("decode" or "prefill"), once per process; under a
    dispatch mode (pivot/engine/traffic.py's counter), where dynamo cannot compile, and where
    calling the compiled function leaves it unable to compile later, the operator itself."""
    if _get_current_dispatch_mode() is not None:
        return flex_attention
    return _compiled(layout)


def cache_views(kc: torch.Tensor, vc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One layer's cache `[slots, Hkv, D]` as flex's key and value `[1, Hkv, slots, D]` (views)."""
    return kc.unsqueeze(0).transpose(1, 2), vc.unsqueeze(0).transpose(1, 2)


class FlexTables:
    """The block tables of decode steps, in device buffers for up to `max_batch` rows, and the
    cache's block -> logical index map prefill masks read (`logical`).

    Row r: column 0 its last block (partial), columns 1.. its other blocks (full); `n_full[r]`
    of them; `last_len[r]` keys of the last block visible. Rows past a step's batch are padding:
    they visit one key of the scratch block (`KVCache.scratch_block`)."""

    def __init__(
        self, max_batch: int, num_blocks: int, block_size: int, device: torch.device
    ) -> None:
        self.block_size, self.scratch = block_size, num_blocks
        width = num_blocks + 2  # the full blocks' view (from column 1) spans every block
        self.table = torch.full(
            (max_batch, 1, 1, width), num_blocks, dtype=torch.int32, device=device
        )
        self.n_full = torch.zeros(max_batch, 1, 1, dtype=torch.int32, device=device)
        self.n_partial = torch.ones(max_batch, 1, 1, dtype=torch.int32, device=device)
        self.last_len = torch.ones(max_batch, dtype=torch.int32, device=device)
        self.logical = torch.zeros(num_blocks + 1, dtype=torch.int32, device=device)
        self._pinned = device.type == "cuda"

    def pad(self) -> None:
        """Every row padding (what a graph is captured on)."""
        self.table[:, :, :, 0] = self.scratch
        self.n_full.zero_()
        self.last_len.fill_(1)

    def fill(self, ctx: torch.Tensor, tables: torch.Tensor, batch: int) -> None:
        """Rows for contexts `ctx` [n] with block tables `tables` [n, >= their blocks] (host), then
        padding up to `batch` rows. Writes the columns the step uses, not the whole table."""
        bs, n = self.block_size, len(ctx)
        n_blocks = (ctx + bs - 1) // bs
        widest = int(n_blocks.max())
        rows = torch.empty(batch, widest, dtype=torch.int32)
        rows[:, 0] = self.scratch
        last = n_blocks - 1
        rows[:n, 0] = tables[torch.arange(n), last].to(torch.int32)
        rows[:n, 1:] = tables[:, : widest - 1].to(torch.int32)  # blocks past a row's own: unread
        counts = torch.zeros(2, batch, dtype=torch.int32)
        counts[0, :n] = last.to(torch.int32)
        counts[1] = 1
        counts[1, :n] = (ctx - last * bs).to(torch.int32)
        if self._pinned:
            rows, counts = rows.pin_memory(), counts.pin_memory()
        self.table[:batch, 0, 0, :widest].copy_(rows, non_blocking=True)
        self.n_full[:batch, 0, 0].copy_(counts[0], non_blocking=True)
        self.last_len[:batch].copy_(counts[1], non_blocking=True)

    def mask(self, batch: int, slots: int) -> BlockMask:
        """The block mask of the first `batch` rows over a cache of `slots` slots."""
        bs, last_len = self.block_size, self.last_len[:batch]

        def last_block_keys(
            b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor
        ) -> torch.Tensor:
            return kv % bs < last_len[b]  # evaluated on the partial (last) block only

        table = self.table[:batch]
        return BlockMask.from_kv_blocks(
            self.n_partial[:batch], table, self.n_full[:batch], table[..., 1:],
            BLOCK_SIZE=(1, bs), mask_mod=last_block_keys, seq_lengths=(1, slots),
            compute_q_blocks=False,
        )  # fmt: skip


def decode(
    q: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor, mask: BlockMask | None
) -> torch.Tensor:
    """q [B, Hq, D], one query per sequence -> [B, Hq, D] (`mask` None: unmasked)."""
    k, v = cache_views(kc, vc)
    out = compiled_flex("decode")(q.unsqueeze(2), k, v, block_mask=mask, enable_gqa=True)
    return out.squeeze(2)


class PrefillPlan:
    """The packed layout and block mask of a step's prefilling sequences (built on the host from
    their query lengths, contexts and block tables; one per step, shared by every layer)."""

    def __init__(
        self,
        q_lens: torch.Tensor,
        ctx: torch.Tensor,
        tables: torch.Tensor,
        first_row: torch.Tensor,
        flex: FlexTables,
    ) -> None:
        """`first_row` [S]: each sequence's first query in the step's packed rows; `flex.logical`
        is written here for these sequences' blocks."""
        bs, num_blocks, logical = flex.block_size, flex.scratch, flex.logical
        device = logical.device
        tiles = (q_lens + Q_TILE - 1) // Q_TILE
        n_tiles = int(tiles.sum())
        seq_of_tile = torch.repeat_interleave(torch.arange(len(q_lens)), tiles)
        tile_start = torch.cumsum(tiles, 0) - tiles
        j = torch.arange(n_tiles) - tile_start[seq_of_tile]  # the tile's index in its sequence
        i = j[:, None] * Q_TILE + torch.arange(Q_TILE)  # query index within the sequence
        real = i < q_lens[seq_of_tile, None]
        i = torch.minimum(i, q_lens[seq_of_tile, None] - 1)  # padding repeats the last query
        start = (ctx - q_lens)[seq_of_tile, None]
        q_pos = start + i
        self.rows = (first_row[seq_of_tile, None] + i).flatten().to(device)
        """Packed rows that fill the tiles (padding repeats a real row)."""
        self.real = real.flatten().nonzero()[:, 0].to(device)
        """Entries of the tiled output that are real queries, in packed order."""
        visits = q_pos[:, -1] // bs + 1  # a tile's blocks: up to its last query's
        width = num_blocks + 2
        idx = torch.full((n_tiles, width), num_blocks, dtype=torch.int32)
        most = int(visits.max())
        idx[:, :most] = tables[seq_of_tile, :most].to(torch.int32)
        n_blocks = (ctx + bs - 1) // bs
        blocks = [tables[s, : int(n)] for s, n in enumerate(n_blocks)]
        logical[torch.cat(blocks).to(device)] = torch.cat(
            [torch.arange(len(b), dtype=torch.int32) for b in blocks]
        ).to(device)
        self.q_len = n_tiles * Q_TILE
        pos = q_pos.flatten().to(device)
        slots = (num_blocks + 1) * bs

        def causal(
            b: torch.Tensor, h: torch.Tensor, q: torch.Tensor, kv: torch.Tensor
        ) -> torch.Tensor:
            return logical[kv // bs] * bs + kv % bs <= pos[q]

        self.mask = BlockMask.from_kv_blocks(
            visits.to(torch.int32).view(1, 1, n_tiles).to(device),
            idx.view(1, 1, n_tiles, width).to(device),
            BLOCK_SIZE=(Q_TILE, bs), mask_mod=causal, seq_lengths=(self.q_len, slots),
            compute_q_blocks=False,
        )  # fmt: skip

    def __call__(self, q: torch.Tensor, kc: torch.Tensor, vc: torch.Tensor) -> torch.Tensor:
        """q [N, Hq, D], the step's packed queries -> [R, Hq, D] for these sequences' real rows,
        in packed order."""
        k, v = cache_views(kc, vc)
        tiled = q.index_select(0, self.rows).transpose(0, 1).unsqueeze(0)  # [1, Hq, tiles, D]
        out = compiled_flex("prefill")(tiled, k, v, block_mask=self.mask, enable_gqa=True)
        return out[0].transpose(0, 1).index_select(0, self.real)
