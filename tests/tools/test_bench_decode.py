"""tools/bench_decode.py's references: the HBM floor's bytes and bandwidth, and each timed engine
freed before the next is built (its smoke run is in tests/tools/test_tool_smoke.py)."""

from __future__ import annotations

import argparse
import gc
import weakref

import pytest
import torch

import tools.bench_decode as bench
from pivot.model import CausalLM, ModelArgs
from pivot.model.meta_init import params_on_meta


@pytest.mark.parametrize(
    "name, gbps",
    [
        ("NVIDIA H100 80GB HBM3", 3350),  # SXM5
        ("NVIDIA H100 PCIe", 2000),
        ("NVIDIA H100 NVL", 3900),
        ("NVIDIA H200", 4800),
        ("NVIDIA H200 NVL", 4800),
        ("NVIDIA H20", 4000),
        ("NVIDIA H800", 3350),
        ("NVIDIA H800 PCIe", 2000),
        ("NVIDIA A100-SXM4-80GB", 2039),
        ("NVIDIA A100 80GB PCIe", 1935),
        ("NVIDIA A100-SXM4-40GB", 1555),
        ("NVIDIA A100-PCIE-40GB", 1555),
        ("NVIDIA B200", 8000),
        ("NVIDIA GH200 480GB", 0),  # two memory configurations under one name: unknown
        ("NVIDIA L40S", 0),
    ],
)
def test_bandwidth_of_each_variant_from_its_data_sheet(name: str, gbps: float) -> None:
    assert bench.hbm_gbps(name) == gbps
    assert bench.hbm_gbps(name, 1234.0) == 1234.0  # --hbm-gbps wins


@pytest.mark.parametrize("tied", [False, True])
def test_the_floor_reads_the_batchs_embedding_rows_unless_tied(tied: bool) -> None:
    """A decode step gathers B rows of the input embedding; the LM head reads its whole matrix,
    which is the embedding itself when tied. Oracle: counted from the shape, not the modules."""
    args = ModelArgs(**{**bench.qwen2_fields("tiny"), "tie_word_embeddings": tied})
    with params_on_meta():
        model = CausalLM(args).to(torch.bfloat16)
    h, v, i, n = args.hidden_size, args.vocab_size, args.intermediate_size, args.num_hidden_layers
    q, kv = args.num_attention_heads * args.head_dim, args.num_key_value_heads * args.head_dim
    layer = h * (q + 2 * kv) + (q + 2 * kv) + q * h + 3 * h * i + 2 * h  # biased q/k/v, 2 norms
    for batch, ctx in ((1, 0), (3, 10), (v + 7, 1)):
        embed_rows = v if tied else min(batch, v)  # tied: the LM head's read covers it
        head = 0 if tied else v * h
        params = n * layer + h + embed_rows * h + head
        kv_bytes = batch * ctx * n * 2 * kv
        assert bench.step_bytes(model, batch, ctx) == 2 * (params + kv_bytes)


def test_each_timed_engine_is_freed_when_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    """The model runner and its decode graphs hold each other: without a cycle collection the
    engine, and its KV cache, outlive `time_engine` (with the collector off here, as it may be
    for a whole batch size's run), and the next batch size's engine is built beside it."""
    built: list[weakref.ref] = []

    class Spy(bench.Engine):  # type: ignore[misc,name-defined]
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)
            built.append(weakref.ref(self.runner.cache))

    monkeypatch.setattr(bench, "Engine", Spy)
    model = bench.model_of("tiny", torch.float32, "cpu")
    a = argparse.Namespace(device="cpu", prompt=8, warmup=1, steps=2)
    gc.collect()
    gc.disable()
    try:
        bench.time_engine(model, 2, a, "eager")
        assert len(built) == 1 and built[0]() is None
    finally:
        gc.enable()
