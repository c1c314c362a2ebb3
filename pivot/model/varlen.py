"""Attention over packed sequences: several rows laid end to end in one [1, T] batch, each row
attending causally to itself only (the trainer's packed micro-batches, pivot/rl/logprobs.py).

`VarlenAttention` is an `AttentionBackend` (pivot/model/transformer.py) built from the rows'
boundaries (`cu_seqlens`: 0, len0, len0 + len1, ..., T); the kernel is chosen by capability, as
the engine chooses its own (pivot/engine/config.py):
- `flash` (`--model.attention flash`): flash-attn's varlen kernel, the layout it is made for;
- `flex` (a GPU without flash-attn): torch's FlexAttention with a document mask, compiled, so
  blocks across two rows are skipped, never computed and masked;
- `sdpa` (CPU): SDPA on each row's slice, which costs a launch per row and layer, nothing else.
Each keeps GQA native: K/V are never repeated to the query heads. Linear-attention layers
(Qwen3.5's Gated DeltaNet) run each row from a zero state, as the row alone would.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

if TYPE_CHECKING:
    from pivot.model.deltanet import GatedDeltaNet

VARLEN_KERNELS = ("sdpa", "flex", "flash")
FLEX_BLOCK = 128
"""FlexAttention's block: query and KV tiles of the document mask."""


def varlen_kernel(model_attention: str, device: torch.device) -> str:
    """The kernel for packed rows: flash-attn's where the model asks for flash, FlexAttention
    on a GPU, SDPA per row on CPU (compiling flex's CPU kernel costs each rank seconds)."""
    if model_attention == "flash":
        return "flash"
    return "flex" if device.type == "cuda" else "sdpa"


class VarlenAttention:
    def __init__(self, lengths: list[int], kernel: str, device: torch.device | str) -> None:
        """`lengths`: each packed row's token count, in order (their sum is T)."""
        if kernel not in VARLEN_KERNELS:
            raise ValueError(f"varlen kernel {kernel!r} is not one of {', '.join(VARLEN_KERNELS)}")
        self.kernel, self.lengths = kernel, lengths
        bounds = [0]
        for n in lengths:
            bounds.append(bounds[-1] + n)
        self.bounds = bounds
        self.cu_seqlens = torch.tensor(bounds, dtype=torch.int32, device=device)
        self._mask: Any = None

    # A compiled layer (train.compile) calls the kernel between graphs: traced, the per-row loop
    # would recompile for every set of row lengths. torch's lazy form of torch.compiler.disable:
    # the public one imports torch._dynamo when this class is defined, seconds on every rank.
    @torch._disable_dynamo
    def __call__(
        self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
    ) -> torch.Tensor:
        """q [1, T, Hq, D], k/v [1, T, Hkv, D] -> [1, T, Hq, D]."""
        if self.kernel == "flash":
            from flash_attn import flash_attn_varlen_func  # GPU only

            top = max(self.lengths)
            out = flash_attn_varlen_func(
                q[0], k[0], v[0], self.cu_seqlens, self.cu_seqlens, top, top, causal=True
            )
            return out[None]
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)  # [1, H, T, D]
        if self.kernel == "flex":
            out = _compiled_flex()(qt, kt, vt, block_mask=self._document_mask(q.shape[1]),
                                   enable_gqa=True)  # fmt: skip
        else:
            out = torch.cat(
                [
                    F.scaled_dot_product_attention(
                        qt[:, :, s:e], kt[:, :, s:e], vt[:, :, s:e], is_causal=True, enable_gqa=True
                    )
                    for s, e in zip(self.bounds, self.bounds[1:])
                ],
                dim=2,
            )
        return out.transpose(1, 2)

    @torch._disable_dynamo  # lazy, as __call__
    def linear_attention(
        self, layer_idx: int, layer: GatedDeltaNet, x: torch.Tensor
    ) -> torch.Tensor:
        """Each row's slice from a zero state: a packed row must not see its predecessor's."""
        return torch.cat([layer(x[:, s:e])[0] for s, e in zip(self.bounds, self.bounds[1:])], dim=1)

    def _document_mask(self, total: int) -> Any:
        """FlexAttention's block mask (built once per micro-batch, shared by every layer): causal
        within a row, nothing across rows, from block-level tables, never a [T, T] mask. A KV
        block is visited by a query block from the block of its first query's row start up to the
        diagonal; it is full (no mask evaluated) when both blocks lie in one row below it."""
        if self._mask is None:
            from torch.nn.attention.flex_attention import BlockMask

            device = self.cu_seqlens.device
            lengths = torch.tensor(self.lengths, device=device)
            row = torch.repeat_interleave(torch.arange(len(self.lengths), device=device), lengths)
            n = -(-total // FLEX_BLOCK)
            first = torch.arange(n, device=device) * FLEX_BLOCK  # each block's first token
            last = torch.clamp(first + FLEX_BLOCK - 1, max=total - 1)
            start = self.cu_seqlens[:-1].long()[row[first]]  # the row start of each first token
            lo = start // FLEX_BLOCK  # [n] the first KV block each query block visits
            j = torch.arange(n, device=device)
            visited = (j[None, :] >= lo[:, None]) & (
                j[None, :] <= j[:, None]
            )  # [q block, kv block]
            one_row = row[first] == row[last]  # [n] a block inside one row
            full = (
                visited
                & (j[None, :] < j[:, None])
                & one_row[:, None]
                & one_row[None, :]
                & (row[first][:, None] == row[first][None, :])
            )
            partial = visited & ~full

            def same_row_causal(b: Any, h: Any, q: Any, kv: Any) -> Any:
                return (row[q] == row[kv]) & (kv <= q)

            def table(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
                # each query block's KV blocks, listed first (the order flex reads them in)
                order = torch.sort(~blocks, dim=1, stable=True).indices
                return blocks.sum(1).to(torch.int32)[None, None], order.to(torch.int32)[None, None]

            self._mask = BlockMask.from_kv_blocks(
                *table(partial), *table(full), BLOCK_SIZE=FLEX_BLOCK, mask_mod=same_row_causal,
                seq_lengths=(total, total),
            )  # fmt: skip
        return self._mask


@cache
def _compiled_flex() -> Any:
    """flex_attention compiled once per process (eager flex is its unfused reference)."""
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=True)
