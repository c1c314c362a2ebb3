"""tools/bench_launches.py's counts and floor, held against facts that do not come from it: a
view launches nothing and an in-place write does; operators grow by the same amount with every
layer and not with the widths; a MoE model syncs once a MoE layer (its expert split) and a
dense one never; the bytes a step reads are the hub's published parameter counts in bf16."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tools.bench_launches import SHAPES, count_step, launches, small_args, step_bytes

aten = torch.ops.aten


def test_views_and_allocations_launch_nothing_and_writes_do() -> None:
    for view in (aten.view.default, aten.t.default, aten.expand.default, aten.split.Tensor):
        assert not launches(view), view
    assert not launches(aten.empty.memory_format)
    for kernel in (aten.add.Tensor, aten.mm.default, aten.index_add_.default, aten.copy_.default):
        assert launches(kernel), kernel


def test_operators_grow_by_layer_and_not_with_width() -> None:
    base = small_args("Qwen2.5-7B")
    ops = [count_step(dataclasses.replace(base, num_hidden_layers=n), 2, 8).ops for n in (1, 2, 3)]
    assert ops[2] - ops[1] == ops[1] - ops[0] > 0
    wide = dataclasses.replace(base, num_hidden_layers=2, hidden_size=128, intermediate_size=320)
    assert count_step(wide, 2, 8).ops == ops[1]


def test_moe_syncs_once_a_layer_and_is_not_graphed() -> None:
    moe = dataclasses.replace(small_args("Qwen3-30B-A3B"), num_hidden_layers=3)
    got = count_step(moe, 2, 8)
    assert got.syncs == 3 and "MoE" in got.graphs
    dense = count_step(dataclasses.replace(small_args("Qwen2.5-7B"), num_hidden_layers=3), 2, 8)
    assert dense.syncs == 0 and dense.graphs == ""
    assert got.ops > dense.ops


@pytest.mark.parametrize(
    "name, batch, published_b",
    [
        ("Qwen2.5-7B", 1, 7.62),  # the model card: 7.61B parameters (15.23 GB in bf16)
        ("Qwen2.5-72B", 1, 72.7),
        ("Qwen3-30B-A3B", 10**6, 30.5),  # every expert touched: all 30.5B
        ("Qwen3-30B-A3B", 1, 3.3),  # one token: its 8 of 128 experts, the 3.3B active
    ],
)
@pytest.mark.slow
def test_floor_bytes_are_the_published_parameters_in_bf16(
    name: str, batch: int, published_b: float
) -> None:
    assert name in SHAPES
    assert step_bytes(name, batch, 0) / 2e9 == pytest.approx(published_b, rel=0.03)
