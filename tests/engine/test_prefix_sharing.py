"""Prefix sharing in the engine: outputs equal those of each request run alone in its own engine
(nothing to share), for GRPO-style groups, under abort/resume and under KV pressure."""

from __future__ import annotations

from pathlib import Path

import pytest

from pivot.engine import Engine, EngineConfig, Output, Request, SamplingParams
from tests.engine.conftest import make_model, prompts, run_all

CONFIG = EngineConfig(
    kv_capacity_tokens=512, block_size=4, max_running_seqs=8, max_prefill_tokens=32
)
GREEDY = SamplingParams(temperature=0, max_new_tokens=10, ignore_eos=True)


def _seeded(i: int) -> SamplingParams:
    return SamplingParams(
        temperature=1.0, top_p=0.9, max_new_tokens=10, ignore_eos=True, seed=100 + i
    )


def _groups(lengths: list[int], g: int, params) -> list[Request]:
    """`g` copies of a prompt of each length (a GRPO batch), copies submitted together."""
    ps = [prompts(1, seed=10 + n, lo=n, hi=n + 1)[0] for n in lengths]
    return [Request(k * g + j, p, params(k * g + j)) for k, p in enumerate(ps) for j in range(g)]


def _alone(path: Path, requests: list[Request], config: EngineConfig = CONFIG) -> dict[int, Output]:
    outs = {}
    for r in requests:
        engine = Engine.from_pretrained(path, config)
        engine.add(r)
        outs.update(run_all(engine))
    return outs


def _assert_same(got: dict[int, Output], want: dict[int, Output]) -> None:
    assert sorted(got) == sorted(want)
    for i, w in want.items():
        assert got[i].output_ids == w.output_ids, i
        assert got[i].output_logprobs == pytest.approx(w.output_logprobs, abs=1e-4), i


def _assert_all_free(engine: Engine) -> None:
    bm = engine.blocks
    assert not bm.tables and bm.ref == [0] * bm.num_blocks and bm.num_free_blocks == bm.num_blocks


@pytest.mark.parametrize("params", [lambda i: GREEDY, _seeded], ids=["greedy", "seeded"])
def test_groups_prefill_once_and_match_running_alone(tiny_path: Path, params) -> None:
    lengths, g = (
        [10, 12, 13],
        4,
    )  # copy-on-write of a partial block (10), of a full one (12), none (13)
    requests = _groups(lengths, g, params)
    engine = Engine.from_pretrained(tiny_path, CONFIG)
    for r in requests:
        engine.add(r)
    got = run_all(engine)
    _assert_same(got, _alone(tiny_path, requests))
    s = engine.stats()
    # each prompt once, then every other copy only its last token (for its logits)
    assert s.prefill_tokens == sum(n + g - 1 for n in lengths)
    assert s.prefix_hit_tokens == sum((g - 1) * (n - 1) for n in lengths)
    _assert_all_free(engine)


@pytest.mark.parametrize("params", [lambda i: GREEDY, _seeded], ids=["greedy", "seeded"])
def test_abort_resume_reuses_own_blocks(tiny_path: Path, params) -> None:
    requests = _groups([7, 10], 3, params)
    want = _alone(tiny_path, requests)
    engine = Engine.from_pretrained(tiny_path, CONFIG)
    for r in requests:
        engine.add(r)
    got = {}
    for _ in range(5):
        got.update({o.id: o for o in engine.step()})
    partials = engine.abort([r.id for r in requests])
    _assert_all_free(engine)
    hits = engine.stats().prefix_hit_tokens
    for r in partials:
        engine.add(r)  # the same engine: the computed blocks are still cached
    got.update(run_all(engine))
    _assert_same(got, want)
    assert engine.stats().prefix_hit_tokens - hits >= sum(
        len(r.prompt_ids) + len(r.output_ids) - 4 for r in partials
    )
    _assert_all_free(engine)


def test_kv_pressure_preempts_and_evicts(tiny_path: Path) -> None:
    small = EngineConfig(
        kv_capacity_tokens=64, block_size=4, max_running_seqs=6, max_prefill_tokens=16
    )
    requests = _groups([9, 14, 5], 3, _seeded)
    engine = Engine.from_pretrained(tiny_path, small)
    for r in requests:
        engine.add(r)
    got = run_all(engine)
    _assert_same(got, _alone(tiny_path, requests, small))
    _assert_all_free(engine)


def test_new_weights_drop_the_cache(tiny_path: Path, tmp_path: Path) -> None:
    other = make_model(tmp_path, seed=1)
    request = _groups([11], 1, lambda i: GREEDY)[0]
    engine = Engine.from_pretrained(tiny_path, CONFIG)
    engine.add(request)
    run_all(engine)
    engine.load_weights(dict(other.named_parameters()), version=1)
    engine.add(request)
    got = run_all(engine)
    assert engine.stats().prefix_hit_tokens == 0
    _assert_same(got, _alone(tmp_path, [request]))
