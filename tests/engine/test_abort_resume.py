"""Abort/resume across two engines equals an uninterrupted run; stats() is exact."""

from __future__ import annotations

from pathlib import Path

import pytest

from pivot.engine import Engine, EngineConfig, Request, SamplingParams
from tests.engine.conftest import prompts, run_all

CONFIG = EngineConfig(
    kv_capacity_tokens=512, block_size=4, max_running_seqs=5, max_prefill_tokens=24
)


@pytest.mark.parametrize(
    "params",
    [
        SamplingParams(temperature=0, max_new_tokens=16, ignore_eos=True),
        SamplingParams(temperature=1.0, top_p=0.95, max_new_tokens=16, seed=11),
    ],
    ids=["greedy", "seeded"],
)
def test_abort_resume_on_another_replica(tiny_path: Path, params: SamplingParams) -> None:
    ps = prompts(7, seed=4)
    reference = Engine.from_pretrained(tiny_path, CONFIG)
    for i, p in enumerate(ps):
        reference.add(Request(i, p, params))
    want = run_all(reference)

    a = Engine.from_pretrained(tiny_path, CONFIG)
    b = Engine.from_pretrained(tiny_path, CONFIG)
    for i, p in enumerate(ps):
        a.add(Request(i, p, params))
    got = {}
    for _ in range(6):  # some finished prefill and decoded a few tokens, some still waiting
        got.update({o.id: o for o in a.step()})
    aborted = a.abort([*range(7), 99])
    assert aborted.unknown_ids == [99] and not a.has_work()
    assert a.stats().kv_free_tokens == a.stats().kv_total_tokens
    assert any(r.output_ids for r in aborted)
    for r in aborted:
        assert len(r.output_ids) == len(r.output_logprobs) and r.prompt_ids == ps[r.id]
        b.add(r)
    got.update(run_all(b))
    assert sorted(got) == list(range(7))
    for i in range(7):
        assert got[i].output_ids == want[i].output_ids, i
        assert got[i].output_logprobs == pytest.approx(want[i].output_logprobs, abs=1e-4)


def test_stats_exact(tiny_path: Path) -> None:
    engine = Engine.from_pretrained(tiny_path, CONFIG)
    ps = prompts(9, seed=5)
    for i, p in enumerate(ps):
        engine.add(
            Request(i, p, SamplingParams(temperature=0, max_new_tokens=3 + i, ignore_eos=True))
        )
    lens = {i: len(p) for i, p in enumerate(ps)}
    generated = 0
    s = engine.stats()
    assert (s.n_seq, s.n_tok, s.kv_free_tokens, s.kv_total_tokens) == (
        9,
        sum(lens.values()),
        512,
        512,
    )
    while engine.has_work():
        done = engine.step()
        s = engine.stats()
        running = {q.id: q for q in engine.scheduler.running}
        live = engine._seqs.values()
        assert s.n_seq == len(live) and s.n_tok == sum(len(q.token_ids) for q in live)
        used_blocks = sum(-(-q.num_computed // 4) for q in running.values())
        assert s.kv_free_tokens == 512 - 4 * used_blocks
        generated += sum(len(o.output_ids) for o in done)
        assert s.last_step_latency_s > 0
    assert s.tokens_generated == generated == sum(3 + i for i in range(9))
    assert (s.n_seq, s.n_tok, s.kv_free_tokens) == (0, 0, 512)
