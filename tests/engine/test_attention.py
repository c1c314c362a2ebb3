"""Paged attention over packed sequences of mixed lengths equals per-sequence dense attention."""

from __future__ import annotations

import pytest
import torch

from pivot.engine import Engine, EngineConfig
from pivot.engine.attention import KVCache, PagedAttention, StepInput
from pivot.engine.flex_paged import FlexTables
from pivot.model import CausalLM
from tests.engine.conftest import tiny_args

BS, HQ, HKV, D = 4, 4, 2, 8


@pytest.mark.parametrize("kernel", ["gather", "flex"])
@pytest.mark.slow
def test_packed_steps_equal_dense_per_sequence(kernel: str) -> None:
    """Each kernel, against attention written out per query (an oracle of its own)."""
    g = torch.Generator().manual_seed(0)
    # (cached tokens, new tokens): decodes of very different contexts, prefill chunks with and
    # without a cached context, so several groups of each kind are formed
    shapes = [(0, 1), (3, 1), (40, 1), (41, 1), (90, 1), (0, 7), (12, 5), (60, 9), (2, 1)]
    cache = KVCache([0], 128, BS, HKV, D, torch.float32, "cpu")
    cache.k.normal_(generator=g)
    cache.v.normal_(generator=g)
    free = torch.randperm(128, generator=g).tolist()
    tables = [[free.pop() for _ in range(-(-(c + n) // BS))] for c, n in shapes]
    step = StepInput(
        token_ids=torch.zeros(sum(n for _, n in shapes), dtype=torch.long),
        q_lens=torch.tensor([n for _, n in shapes]),
        ctx_lens=torch.tensor([c + n for c, n in shapes]),
        block_ids=torch.tensor([b for t in tables for b in t]),
        sample_rows=torch.zeros(0, dtype=torch.long),
        copies=torch.zeros(0, dtype=torch.long),
        seq_ids=torch.arange(len(shapes)),
        dropped=torch.zeros(0, dtype=torch.long),
    )
    assert StepInput.unpack(step.pack()).block_ids.tolist() == step.block_ids.tolist()
    total = int(step.q_lens.sum())
    q = torch.randn(1, total, HQ, D, generator=g)
    k = torch.randn(1, total, HKV, D, generator=g)
    v = torch.randn(1, total, HKV, D, generator=g)
    flex = FlexTables(len(shapes), 128, BS, torch.device("cpu")) if kernel == "flex" else None
    attn = PagedAttention(cache, step, kernel, "cpu", flex=flex)
    if kernel == "gather":
        assert len(attn.groups) >= 4
    out = attn(0, q, k, v)[0]
    row = 0
    for (c, n), table in zip(shapes, tables):
        slots = [table[p // BS] * BS + p % BS for p in range(c + n)]
        keys, values = cache.k[0, slots], cache.v[0, slots]  # includes this step's writes
        assert torch.equal(keys[c:], k[0, row : row + n]) and torch.equal(
            values[c:], v[0, row : row + n]
        )
        for i in range(n):
            qi = q[0, row + i]  # position c + i sees keys 0..c+i
            kk = keys[: c + i + 1].repeat_interleave(HQ // HKV, dim=1)
            vv = values[: c + i + 1].repeat_interleave(HQ // HKV, dim=1)
            w = torch.softmax((kk * qi).sum(-1) / D**0.5, dim=0)  # [keys, HQ]
            torch.testing.assert_close(
                out[row + i], (w[..., None] * vv).sum(0), atol=1e-5, rtol=1e-5
            )
        assert attn.positions[row : row + n].tolist() == list(range(c, c + n))
        row += n


def test_copy_blocks_in_every_attention_layer_of_a_hybrid() -> None:
    """A hybrid's cache holds only its attention layers (here 1 and 3 of 4): a block copy moves
    that block's slots in each of them and touches nothing else."""
    cache = KVCache([1, 3], 6, BS, HKV, D, torch.float32, "cpu")
    cache.k.normal_(generator=torch.Generator().manual_seed(1))
    cache.v.normal_(generator=torch.Generator().manual_seed(2))
    k0, v0 = cache.k.clone(), cache.v.clone()
    cache.copy_blocks(torch.tensor([4, 0, 2, 5]))  # 4 -> 0, 2 -> 5
    want_k, want_v = k0.clone(), v0.clone()
    for src, dst in ((4, 0), (2, 5)):
        want_k[:, dst * BS : (dst + 1) * BS] = k0[:, src * BS : (src + 1) * BS]
        want_v[:, dst * BS : (dst + 1) * BS] = v0[:, src * BS : (src + 1) * BS]
    assert cache.k.shape[0] == 2 and cache.index == {1: 0, 3: 1}
    assert torch.equal(cache.k, want_k) and torch.equal(cache.v, want_v)


def test_engine_refuses_a_flash_block_size_flash_attn_cannot_page() -> None:
    """flash-attn's paged KV needs blocks of a multiple of 256 tokens; the check runs before any
    kernel is touched (so it fires on CPU too), naming the field and value."""
    with torch.device("meta"):
        model = CausalLM(tiny_args())
    with pytest.raises(ValueError, match="engine.block_size=16"):
        Engine(
            model,
            EngineConfig(kv_capacity_tokens=1024, block_size=16),
            attention="flash",
            device="cpu",
        )
