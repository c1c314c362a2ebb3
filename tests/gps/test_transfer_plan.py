"""Pure-Python tests: layouts, refinement, balanced plans, plan cache, bad input."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pivot.gps.layout import (
    Layout,
    Place,
    fsdp_layout,
    gps_layouts,
    grouped_layout,
    parallel_layout,
    replicated_layout,
)
from pivot.gps.refine import refine
from pivot.gps.runs import paired_runs, runs
from pivot.gps.spec import TensorSpec, qwen2_specs, qwen25_72b_specs
from pivot.gps.transfer_plan import LinkProfile, PlanCache, plan


def tiny_specs(layers: int, hidden: int, vocab: int) -> list[TensorSpec]:
    return qwen2_specs(layers, hidden, 2 * hidden, 2, 2, hidden // 2, vocab, dtype="float16")


@st.composite
def scenario(draw):
    hosts = draw(st.integers(1, 4))
    per_host = draw(st.sampled_from([1, 2, 4]))
    tp = draw(st.sampled_from([t for t in (1, 2, 4) if t <= hosts * per_host]))
    pp = draw(st.sampled_from([p for p in (1, 2) if tp * p <= hosts * per_host]))
    dp = draw(st.integers(1, hosts * per_host // (tp * pp)))
    specs = tiny_specs(
        draw(st.integers(1, 3)), 4 * draw(st.integers(1, 3)), 8 * draw(st.integers(1, 3))
    )
    k = draw(st.sampled_from([k for k in range(1, hosts + 1) if hosts % k == 0]))
    gps = grouped_layout("m", specs, list(range(hosts)), k)
    host_of = [r // per_host for r in range(hosts * per_host)]
    ranks = draw(st.permutations(range(hosts * per_host)))[: dp * tp * pp]
    caller = parallel_layout("m", specs, ranks, host_of, dp=dp, tp=tp, pp=pp)
    if draw(st.booleans()):
        caller = fsdp_layout("m", specs, ranks, host_of)
    profile = LinkProfile(
        local_bw=draw(st.sampled_from([10.0, 50.0])),
        remote_bw=draw(st.sampled_from([5.0, 10.0])),
        overhead_s=draw(st.sampled_from([0.0, 1.0])),
    )
    return gps, caller, profile


def elements(layout: Layout, slices, name):
    spec = layout.spec(name)
    cover = {}
    for s in slices:
        if s.tensor == name:
            for idx in itertools.product(*(range(lo, hi) for lo, hi in s.box)):
                cover[idx] = cover.get(idx, 0) + 1
    return spec, cover


@settings(max_examples=60, deadline=None)
@given(scenario())
def test_refinement_covers_every_element_once_and_is_atomic(case):
    gps, caller, _ = case
    for src, dst in ((gps, caller), (caller, gps)):
        slices = refine(src, dst)
        for spec in src.specs:
            _, cover = elements(src, slices, spec.name)
            assert len(cover) == spec.numel and set(cover.values()) <= {1}
        for s in slices:  # atomic: inside exactly one piece of each side
            for lay, j in ((src, s.src_piece), (dst, s.dst_piece)):
                box = lay.pieces[s.tensor][j].box
                assert all(a <= lo and hi <= b for (lo, hi), (a, b) in zip(s.box, box))


@settings(max_examples=60, deadline=None)
@given(scenario())
def test_plan_delivers_each_needed_slice_once_and_beats_naive(case):
    gps, caller, profile = case
    for src, dst in ((gps, caller), (caller, gps)):
        p = plan(src, dst, profile)
        got = {}
        for t in p.transfers():
            s = p.slices[t.slice]
            assert t.src in s.holders and t.dst in s.receivers
            got[(t.slice, t.dst)] = got.get((t.slice, t.dst), 0) + 1
        need = {(i, r) for i, s in enumerate(p.slices) for r in s.receivers}
        assert set(got) == need and set(got.values()) == {1} or not need
        if src is caller and caller.parallelism.kind != "fsdp":
            continue  # the bound below holds when holder sets are disjoint (GPS and FSDP sources)
        naive = plan(src, dst, profile, balanced=False)
        assert p.max_load <= naive.max_load * (1 + 1e-9) + 1e-12


def test_balanced_plan_spreads_load_over_replicas():
    specs = tiny_specs(2, 8, 16)
    gps = replicated_layout("m", specs, [0, 1, 2, 3])
    caller = parallel_layout("m", specs, list(range(8)), [r // 2 for r in range(8)], dp=4, tp=2)
    p = plan(gps, caller, LinkProfile(local_bw=1e9, remote_bw=1e9, overhead_s=0))
    assert len(p.load) == 4  # every replica host serves some demands
    assert p.max_load < plan(gps, caller, balanced=False).max_load


def test_plan_cache_hits_by_signature():
    specs = tiny_specs(1, 4, 8)
    cache = PlanCache()
    gps = replicated_layout("m", specs, [0, 1])
    a = parallel_layout("m", specs, [0, 1], [0, 1], tp=2)
    first = cache.get(gps, a)
    again = cache.get(
        replicated_layout("m", specs, [0, 1]), parallel_layout("m", specs, [0, 1], [0, 1], tp=2)
    )
    assert again is first and cache.hits == 1 and cache.misses == 1
    cache.get(gps, parallel_layout("m", specs, [0, 1], [0, 1], dp=2))
    assert cache.misses == 2


def test_gps_layouts_pick_smallest_group_that_fits():
    specs = tiny_specs(1, 8, 16)
    total = sum(s.nbytes for s in specs)
    assert (
        gps_layouts({"m": specs}, [0, 1, 2, 3], budget_bytes=2 * total)["m"].parallelism.group == 1
    )
    grouped = gps_layouts({"m": specs}, [0, 1, 2, 3], budget_bytes=total)["m"]
    assert grouped.parallelism.group == 2
    with pytest.raises(ValueError, match=r"model 'm'.*tensor 'model.embed_tokens.weight'"):
        gps_layouts({"m": specs}, [0, 1, 2, 3], budget_bytes=16)


def test_layout_not_covering_a_tensor_names_model_and_tensor():
    specs = tiny_specs(1, 4, 8)
    good = replicated_layout("m", specs, [0])
    pieces = dict(good.pieces)
    del pieces["model.norm.weight"]
    with pytest.raises(ValueError, match=r"model 'm'.*'model.norm.weight'"):
        Layout("m", good.specs, pieces, good.parallelism, good.places)
    half = pieces | {
        "model.norm.weight": (
            good.pieces["model.embed_tokens.weight"][0].__class__(((0, 2),), (Place(0),)),
        )
    }
    with pytest.raises(ValueError, match="model.norm.weight"):
        Layout("m", good.specs, half, good.parallelism, good.places)


def test_tp_that_does_not_divide_names_tensor():
    specs = [TensorSpec("model.layers.0.mlp.up_proj.weight", (6, 4), "float32")]
    with pytest.raises(ValueError, match="up_proj"):
        parallel_layout("m", specs, [0, 1, 2, 3], [0, 0, 0, 0], tp=4)


def test_runs_and_pairing():
    assert runs((4, 6), ((0, 4), (2, 4))) == [(2, 2), (8, 2), (14, 2), (20, 2)]
    assert runs((4, 6), ((1, 3), (0, 6))) == [(6, 12)]
    assert paired_runs([(0, 6), (10, 6)], [(0, 4), (20, 8)]) == [(0, 0, 4), (4, 20, 2), (10, 22, 6)]


def test_72b_plan_has_one_transfer_per_device_slice():
    specs = qwen25_72b_specs()
    assert len(specs) == 963 and 72.5e9 < sum(s.numel for s in specs) < 73e9
    gps = replicated_layout("m", specs, range(16))
    caller = parallel_layout(
        "m", specs, list(range(128)), [r // 8 for r in range(128)], dp=16, tp=8
    )
    p = plan(gps, caller)
    assert len(p.sources) == sum(len(s.receivers) for s in p.slices)
    assert p.max_load <= plan(gps, caller, balanced=False).max_load
