"""Decode steps replayed from captured graphs instead of launched kernel by kernel.

A decode step of a 7B model launches about 1,400 kernels; eagerly, the host's launching takes
most of a step (70-87 ms on an H200 where the bytes moved need 3-4 ms). As vLLM, sglang and
nano-vllm do, each decode step whose batch fits a bucket replays a graph captured once for that
bucket over static input buffers. With torch SDPA a graph is also keyed by the context width (a
bucket of KV blocks, as for batch sizes), since the keys it gathers are padded to that width; flash-attn's
kv-cache kernel reads each sequence's own length, so one width serves every context.

What a replay needs lives in buffers shared by every graph (views of the largest): token ids,
context lengths, slot of the new K/V, block tables, and the fp32 logits every graph copies its
result into (so a graph keeps no output of its own: 256 sequences x a 152K vocabulary is 156 MB
once, not once per graph). Rows past the real batch are padding: they attend one key and write
their K/V to a scratch block no sequence owns (`KVCache.scratch_block`).

Memory and count are planned (`graph_grid`, and `pivot/memory/plan.py`'s "decode graphs" term):
at most `max_graphs` graphs, the width ladder (then the batch ladder) thinned on a log scale to
fit; all share one pool and are captured largest first, so the pool holds one graph's peak, the
largest's (with SDPA, its K/V gather: batch x width x block tokens of one layer).

Capture: an engine built with its weights captures every graph at once (`capture_all`, largest
first); a replica a role shifts up (built empty, or resumed after a release) captures each
bucket the first time a decode step of that size comes (`run`), on every TP rank at the same
step, so a shift up pays only for the buckets its batches reach and none of it on the shift's
critical path (the GPS Read); each such capture synchronises the device and empties the
allocator's cache once (torch/cuda/graphs.py, `graph.__enter__`). Weights loaded in place later
(`ModelRunner.load`, a GPS Read into `Engine.weight_buffers`) keep every graph valid: a graph
reads the parameters' storage, not their values. A release frees that storage, so it drops the
graphs. Graphs captured and seconds spent: `captures`, `capture_s` (the engine's stats).

Modes: "cuda" captures `torch.cuda.CUDAGraph`s; "eager" runs the very same path (buckets,
padding, static buffers, the fixed-width attention) without capturing, so CPU tests check it.
Prefill, mixed steps, batches above the largest bucket, contexts wider than the widest, and
models whose forward syncs with the host (MoE routing) or keeps per-sequence state (linear
attention) run eagerly through `PagedAttention`.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from pivot.engine.attention import KVCache, StepInput, block_tables
from pivot.engine.flex_paged import FlexTables, decode

try:  # optional GPU kernel, never required on CPU
    from flash_attn import flash_attn_with_kvcache
except ImportError:
    flash_attn_with_kvcache = None

log = logging.getLogger(__name__)

Forward = Callable[[torch.Tensor, torch.Tensor, object], torch.Tensor]
"""(token ids [B], positions [B], attention backend) -> fp32 logits [B, vocab]."""


def size_buckets(largest: int) -> list[int]:
    """1, 2, 3, 4, 6, 8, 12, 16, ... up to `largest` (included): a batch pads by under 50%
    (under a third from 4 on) while the count of graphs grows with log(largest)."""
    sizes = {largest}
    p = 1
    while p < largest:
        sizes.update(s for s in (p, 3 * p // 2) if 0 < s < largest)
        p *= 2
    return sorted(sizes)


def bucket_for(n: int, sizes: list[int]) -> int | None:
    """The smallest bucket holding `n`, or None when `n` exceeds them all."""
    return next((s for s in sizes if s >= n), None)


def thin(sizes: list[int], keep: int) -> list[int]:
    """At most `keep` of the ascending `sizes`, spread evenly on a log scale, the largest kept."""
    if len(sizes) <= keep:
        return list(sizes)
    largest = sizes[-1]
    chosen = {bucket_for(math.ceil(largest ** (i / keep)), sizes) for i in range(1, keep + 1)}
    return sorted(c for c in chosen if c is not None)


def graph_grid(
    max_batch: int, widest: int, kernel: str, max_graphs: int
) -> tuple[list[int], list[int]]:
    """The batch buckets and context-width buckets (in KV blocks) that get a graph: every pair,
    at most `max_graphs` of them. Flash-attn reads each sequence's own length, so one width
    serves all, as does flex (a step's block mask says how far each row reads); the gather
    reference's ladder is thinned first (a step then gathers up to the next width kept), the batch
    ladder only when it alone exceeds the cap."""
    batches = thin(size_buckets(max_batch), max_graphs)
    widths = size_buckets(widest) if kernel == "gather" else [widest]
    return batches, thin(widths, max(1, max_graphs // len(batches)))


class DecodeAttention:
    """The attention backend of a graphed decode step: one query per row, fixed shapes."""

    def __init__(
        self,
        cache: KVCache,
        bufs: StaticDecodeInput,
        batch: int,
        width: int,
        kernel: str,
        flex: FlexTables | None,
    ) -> None:
        self.cache, self.kernel = cache, kernel
        self.slots = bufs.slots[:batch]
        self.ctx = bufs.ctx[:batch]
        self.positions = self.ctx - 1
        if kernel == "flex":
            assert flex is not None
            self.flex_mask = flex.mask(batch, cache.k.shape[1])
            return
        self.table = bufs.table[:batch, :width]
        keys = torch.arange(width * cache.block_size, device=self.ctx.device)
        seen = keys[None, :] < self.ctx[:, None]  # computed inside the graph from `ctx`
        self.mask = torch.zeros(seen.shape, dtype=cache.k.dtype, device=seen.device)
        self.mask = self.mask.masked_fill(~seen, float("-inf"))[:, None, None, :]

    def __call__(
        self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        kc, vc = self.cache.write(layer_idx, self.slots, k, v)
        q0 = q[0]
        batch, heads, dim = q0.shape
        kv_heads, bs = kc.shape[1], self.cache.block_size
        if self.kernel == "flex":
            return decode(q0, kc, vc, self.flex_mask).view(1, batch, heads, dim)
        if self.kernel == "flash":
            # flash_attn/flash_attn_interface.py (flash-attn 2.x), flash_attn_with_kvcache: q
            # [B, 1, H, D], paged caches [blocks, block_size, Hkv, D], int32 lengths and table
            out = flash_attn_with_kvcache(
                q0[:, None],
                kc.view(-1, bs, kv_heads, dim),
                vc.view(-1, bs, kv_heads, dim),
                cache_seqlens=self.ctx.to(torch.int32),
                block_table=self.table.to(torch.int32),
                causal=True,
            )
            return out.view(1, batch, heads, dim)
        rep = heads // kv_heads
        qg = q0.view(batch, kv_heads, rep, dim)  # GQA: a K/V head's query heads as its queries
        kb = kc.view(-1, bs * kv_heads * dim)
        vb = vc.view(-1, bs * kv_heads * dim)
        ids = self.table.flatten()
        kk = kb.index_select(0, ids).view(batch, -1, kv_heads, dim).transpose(1, 2).to(q0.dtype)
        vv = vb.index_select(0, ids).view(batch, -1, kv_heads, dim).transpose(1, 2).to(q0.dtype)
        o = F.scaled_dot_product_attention(qg, kk, vv, attn_mask=self.mask.to(q0.dtype))
        return o.reshape(1, batch, heads, dim)

    def linear_attention(self, layer_idx: int, layer: object, x: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("a model with linear attention is never graphed")


@dataclass
class StaticDecodeInput:
    """The buffers every graph reads, sized for the largest bucket and the widest context.
    `tokens`, `slots` and `ctx` are rows of one buffer (`rows`), so a step's inputs reach the
    device in one copy, from pinned memory on CUDA."""

    rows: torch.Tensor
    """[3, batch]: tokens, slots, ctx."""
    tokens: torch.Tensor
    slots: torch.Tensor
    ctx: torch.Tensor
    table: torch.Tensor
    logits: torch.Tensor
    """[batch, vocab] fp32: every graph copies its logits here (a graph keeps no output)."""
    scratch: int
    """The KV block padding rows write to and attend (`KVCache.scratch_block`)."""
    block_size: int

    @classmethod
    def allocate(cls, batch: int, width: int, vocab: int, cache: KVCache) -> StaticDecodeInput:
        def zeros(*shape: int) -> torch.Tensor:
            return torch.zeros(shape, dtype=torch.long, device=cache.k.device)

        logits = torch.zeros(batch, vocab, dtype=torch.float32, device=cache.k.device)
        rows = zeros(3, batch)
        bufs = cls(
            rows, rows[0], rows[1], rows[2], zeros(batch, width), logits,
            cache.scratch_block, cache.block_size,
        )  # fmt: skip
        bufs.pad()
        return bufs

    def pad(self, flex: FlexTables | None = None) -> None:
        """Every row padding: warm-up and capture run on these and touch only the scratch block."""
        self.tokens.zero_()
        self.ctx.fill_(1)
        self.slots.fill_(self.scratch * self.block_size)
        self.table.fill_(self.scratch)
        if flex is not None:
            flex.pad()

    def fill(self, step: StepInput, batch: int, width: int, flex: FlexTables | None) -> None:
        """The step's rows, then padding up to `batch` rows; tables padded to `width` blocks
        (flex: its own tables, only as wide as this step's longest context)."""
        bs, scratch = self.block_size, self.scratch
        ctx = step.ctx_lens.cpu()
        n = len(ctx)
        if flex is not None:
            width = int(-(-ctx.max() // bs))
        table = torch.full((batch, width), scratch, dtype=torch.long)
        table[:n] = block_tables(ctx, step.block_ids.cpu(), bs, width, scratch)
        last = ctx - 1
        host = torch.empty(3, batch, dtype=torch.long)
        host[0, :n], host[0, n:] = step.token_ids.cpu(), 0  # padding: token 0 ...
        host[1, :n] = table[torch.arange(n), last // bs] * bs + last % bs
        host[1, n:] = scratch * bs  # ... written to the scratch block ...
        host[2, :n], host[2, n:] = ctx, 1  # ... attending one key
        if self.rows.device.type == "cuda":
            host = host.pin_memory()
        self.rows[:, :batch].copy_(host, non_blocking=True)
        if flex is not None:
            flex.fill(ctx, table[:n], batch)
        else:
            self.table[:batch, :width].copy_(table, non_blocking=True)


class EagerGraph:
    """What a captured graph does, run eagerly: `replay()` recomputes `output`."""

    def __init__(self, fn: Callable[[], torch.Tensor]) -> None:
        self.fn = fn
        self.output = torch.empty(0)

    def replay(self) -> None:
        self.output = self.fn()


class CudaGraph:
    """`fn` captured once (after a warm-up outside the capture, where lazy initialisation such as
    cuBLAS handles and kernel choice happens); `replay()` re-launches it, rewriting `output`."""

    def __init__(self, fn: Callable[[], torch.Tensor], pool: torch.cuda._POOL_HANDLE) -> None:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            fn()
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, pool=pool):
            self.output = fn()

    def replay(self) -> None:
        self.graph.replay()


GRAPH_MODES = ("auto", "cuda", "eager", "off")


class DecodeGraphs:
    """The graphs of one engine rank; `run(step)` returns the sampling rows' logits (as the eager
    path does), or None to run `step` eagerly."""

    def __init__(
        self,
        forward: Forward,
        mode: str,
        kernel: str,
        max_batch: int,
        max_len: int,
        vocab: int,
        max_graphs: int,
        why_not: str = "",
    ) -> None:
        """`why_not`: the reason this model is never graphed ('' when it can be)."""
        if mode not in GRAPH_MODES:
            raise ValueError(f"engine.decode_graphs={mode!r} is not one of {GRAPH_MODES}")
        self.forward, self.kernel, self.mode = forward, kernel, mode
        self.max_batch, self.max_len, self.vocab = max_batch, max_len, vocab
        self.max_graphs = max_graphs
        self.why_not = why_not
        self.graphs: dict[tuple[int, int], EagerGraph | CudaGraph] = {}
        self.bufs: StaticDecodeInput | None = None
        self.batch_sizes: list[int] = []  # the grid (`graph_grid`), set with `bufs`
        self.widths: list[int] = []
        self.pool: torch.cuda._POOL_HANDLE | None = None  # graph_pool_handle()'s type
        self.replays = self.captures = 0
        self.capture_s = 0.0  # spent capturing (what a start or a shift up pays)

    def active(self, device: torch.device) -> str:
        """'cuda', 'eager' or '' (not graphed) on `device`."""
        if self.why_not or self.mode == "off":
            return ""
        if self.mode == "auto":
            return "cuda" if device.type == "cuda" else ""
        if self.mode == "cuda" and device.type != "cuda":
            raise ValueError(
                f"engine.decode_graphs='cuda' on device {device}: use 'auto' or 'eager'"
            )
        return self.mode

    def _buffers(self, cache: KVCache) -> StaticDecodeInput:
        if self.bufs is None:
            widest = -(-self.max_len // cache.block_size)
            self.batch_sizes, self.widths = graph_grid(
                self.max_batch, widest, self.kernel, self.max_graphs
            )
            table_width = 1 if self.kernel == "flex" else widest  # flex keeps its own tables
            self.bufs = StaticDecodeInput.allocate(
                self.batch_sizes[-1], table_width, self.vocab, cache
            )
        return self.bufs

    def capture_all(self, cache: KVCache, flex: FlexTables | None = None) -> None:
        """Every graph of the grid, largest first (the shared pool then holds the largest's peak):
        when the replica starts or shifts up, so no rollout step waits for a capture. Collective
        under TP (every rank captures the same graphs in the same order)."""
        mode = self.active(cache.k.device)
        if not mode:
            return
        self._buffers(cache)
        t0, before = time.perf_counter(), len(self.graphs)
        for batch in reversed(self.batch_sizes):
            for width in reversed(self.widths):
                if (batch, width) not in self.graphs:
                    self._capture(mode, batch, width, cache, flex)
        if len(self.graphs) > before:
            log.info(
                "decode graphs (%s): %d captured in %.2f s (batches %s, widths %s blocks)",
                mode, len(self.graphs), time.perf_counter() - t0, self.batch_sizes, self.widths,
            )  # fmt: skip

    def run(
        self, step: StepInput, cache: KVCache, flex: FlexTables | None = None
    ) -> torch.Tensor | None:
        mode = self.active(cache.k.device)
        n = len(step.q_lens)
        if not mode or len(step.token_ids) != n:  # not graphed, or prefill in the step
            return None
        bufs = self._buffers(cache)
        batch = bucket_for(n, self.batch_sizes)
        blocks = -(-int(step.ctx_lens.max()) // cache.block_size)
        width = bucket_for(blocks, self.widths)
        if batch is None or width is None:
            return None
        graph = self.graphs.get((batch, width))
        if graph is None:  # only when `capture_all` has not run since the weights' storage came
            graph = self._capture(mode, batch, width, cache, flex)
        bufs.fill(step, batch, width, flex)
        graph.replay()
        self.replays += 1
        rows = step.sample_rows  # one token per row, but a prefill chunk cut to one token by
        if len(rows) == n:  # the budget (or a migrated partial's last one) does not sample
            return bufs.logits[:n]
        return bufs.logits[rows.to(bufs.logits.device)]

    def _capture(
        self, mode: str, batch: int, width: int, cache: KVCache, flex: FlexTables | None
    ) -> EagerGraph | CudaGraph:
        bufs = self.bufs
        assert bufs is not None
        t0 = time.perf_counter()

        forward, kernel = self.forward, self.kernel  # not `self`: a graph kept in `self.graphs`
        # would close a reference cycle over the KV cache, freed only by the garbage collector

        def step() -> torch.Tensor:
            attn = DecodeAttention(cache, bufs, batch, width, kernel, flex)
            out = bufs.logits[:batch]
            out.copy_(forward(bufs.tokens[:batch], attn.positions, attn))
            return out

        if mode == "cuda":
            if self.pool is None:
                self.pool = torch.cuda.graph_pool_handle()
            bufs.pad(flex)  # warm-up and capture compute on padding: only the scratch block changes
            graph: EagerGraph | CudaGraph = CudaGraph(step, self.pool)
        else:
            graph = EagerGraph(step)
        self.graphs[(batch, width)] = graph
        self.captures += 1
        self.capture_s += time.perf_counter() - t0
        log.debug("decode graph (%s) captured: batch %d, width %d blocks", mode, batch, width)
        return graph

    def clear(self) -> None:
        """Drop every graph and the buffers (a release frees the storage they point at)."""
        self.graphs.clear()
        self.bufs, self.pool = None, None
