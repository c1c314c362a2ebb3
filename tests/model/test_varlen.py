"""Attention over packed rows (pivot/model/varlen.py): the FlexAttention document mask, built from
block tables, lists exactly the blocks a token-level mask visits (full where every pair is
allowed) and gives the per-row SDPA's outputs, rows crossing block boundaries and rows of one
token included; it never holds a [T, T] mask. (FlexAttention's backward does not run on CPU:
"FlexAttention does not support backward on CPU"; the tables it would read are the ones checked.)"""

from __future__ import annotations

import pytest
import torch

from pivot.model import varlen
from pivot.model.varlen import FLEX_BLOCK, VarlenAttention

CASES = [[300, 1, 40, 128, 131], [128, 128], [5], [129, 127, 256], [700], [90, 610]]


def dense_block_tables(lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """[q block, kv block] visited and full, from the token mask (the oracle)."""
    row = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))
    t = len(row)
    pos = torch.arange(t)
    allowed = (row[:, None] == row[None, :]) & (pos[None, :] <= pos[:, None])
    n = -(-t // FLEX_BLOCK)
    padded = torch.zeros(n * FLEX_BLOCK, n * FLEX_BLOCK, dtype=torch.bool)
    padded[:t, :t] = allowed
    real = torch.zeros_like(padded)
    real[:t, :t] = True

    def tiled(m: torch.Tensor) -> torch.Tensor:
        return m.reshape(n, FLEX_BLOCK, n, FLEX_BLOCK).transpose(1, 2)

    # full: every pair of real tokens allowed (positions past T do not exist for the kernel)
    return tiled(padded).any(-1).any(-1), tiled(padded | ~real).all(-1).all(-1)


def listed(num: torch.Tensor, idx: torch.Tensor, n: int) -> torch.Tensor:
    out = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        out[i, idx[0, 0, i, : num[0, 0, i]].long()] = True
    return out


@pytest.mark.parametrize("lengths", CASES)
def test_the_block_tables_are_the_token_masks(lengths: list[int]) -> None:
    mask = VarlenAttention(lengths, "flex", "cpu")._document_mask(sum(lengths))
    visited, full = dense_block_tables(lengths)
    n = visited.shape[0]
    got_full = listed(mask.full_kv_num_blocks, mask.full_kv_indices, n)
    got_partial = listed(mask.kv_num_blocks, mask.kv_indices, n)
    assert torch.equal(got_full | got_partial, visited) and not (got_full & got_partial).any()
    assert torch.equal(got_full, full & torch.tril(torch.ones(n, n, dtype=torch.bool), -1))


@pytest.mark.parametrize("lengths", CASES)
def test_flex_over_the_mask_equals_sdpa_per_row(
    lengths: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    from torch.nn.attention.flex_attention import flex_attention

    monkeypatch.setattr(varlen, "_compiled_flex", lambda: flex_attention)  # eager: no C++ build
    torch.manual_seed(0)
    total = sum(lengths)
    q, k, v = torch.randn(1, total, 4, 8), torch.randn(1, total, 2, 8), torch.randn(1, total, 2, 8)
    got = VarlenAttention(lengths, "flex", "cpu")(0, q, k, v)
    want = VarlenAttention(lengths, "sdpa", "cpu")(0, q, k, v)
    assert (got - want).abs().max() < 1e-5


def test_the_mask_lists_blocks_not_tokens() -> None:
    lengths = [3000, 5000, 192]  # T = 8192: a dense mask would be 67M entries
    mask = VarlenAttention(lengths, "flex", "cpu")._document_mask(sum(lengths))
    blocks = sum(lengths) // FLEX_BLOCK
    assert mask.kv_indices.shape[-2:] == (blocks, blocks)
    visited = int(mask.kv_num_blocks.sum() + mask.full_kv_num_blocks.sum())
    assert visited < 0.6 * blocks * (blocks + 1) // 2  # the second row skips the first's blocks
