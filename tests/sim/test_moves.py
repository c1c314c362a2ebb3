"""How often the simulator moves or recomputes a sequence: never in phased deployments (each
phase brings all its replicas up at once onto an idle role), and a bounded number of times when
a larger batch fills the KV caches (the replicas admit with headroom and preempt locally)."""

from __future__ import annotations

import dataclasses

import pytest

from pivot.sim import H20, LengthDist, SimOptions, Workload, simulate
from pivot.sim.deploy import Allocation, deployment
from pivot.sim.workload import step_samples
from tests.sim.conftest import small_cfg


def _first_prefill_tokens(cfg: object, opts: SimOptions) -> int:
    """Tokens prefilled if every rollout and judge sequence is prefilled exactly once, shared
    prefixes counted for each sequence (what the replicas prefill plus what they reuse)."""
    return sum(
        s.prompt_len + s.judge_prompt_len
        for st in range(opts.steps)
        for s in step_samples(opts.workload, cfg.seed, st, 8)
    )


@pytest.mark.parametrize("name", ["colocated", "rr_colocated"])
def test_phase_switch_brings_replicas_up_together(name: str, opts: SimOptions) -> None:
    # every phase shifts all its replicas up at the same instant onto a queue no replica holds
    # yet: one dispatch over all of them places each sequence once, nothing migrates
    cfg = deployment(small_cfg(), name)
    res = simulate(cfg, opts)
    assert any(s.up and s.role == "reward" for s in res.shifts)
    assert res.aborts == 0 and res.preemptions == 0
    assert res.prefill_tokens + res.prefix_hit_tokens == _first_prefill_tokens(cfg, opts)


LONG = Workload(
    prompt=LengthDist(200, 0.3, 1024),
    response=LengthDist(1500, 1.0, 8000),
    judge=LengthDist(1000, 1.0, 8000),
    prompts_per_step=32,
    group_size=16,
)
N_SEQS = 2 * 2 * 32 * 16  # rollout and judge sequences of two steps
SMALL_HBM = dataclasses.replace(H20, memory_gb=24.0)  # the 9B GenRM keeps 88K KV tokens per device


def _big_batch() -> tuple[object, SimOptions]:
    return small_cfg(), SimOptions(hardware=SMALL_HBM, workload=LONG, steps=2, kv_from_engine=False)


def test_full_kv_cache_preempts_a_few_sequences_and_recomputes_little() -> None:
    cfg, opts = _big_batch()
    cfg = deployment(cfg, "disaggregated", Allocation(2, 3))
    res = simulate(cfg, opts)
    assert 0 < res.preemptions <= 0.02 * N_SEQS  # the caches do fill, the replicas do not thrash
    assert res.aborts == 0  # nothing shifts, so the schedulers never abort
    assert res.prefill_tokens + res.prefix_hit_tokens <= 1.02 * _first_prefill_tokens(cfg, opts)


def test_shifting_under_kv_pressure_moves_each_sequence_about_once() -> None:
    cfg, opts = _big_batch()
    cfg = deployment(cfg, "pivot")
    res = simulate(cfg, opts)
    assert res.num_plans > 0
    assert res.aborts + res.preemptions <= N_SEQS
    assert res.prefill_tokens + res.prefix_hit_tokens <= 2 * _first_prefill_tokens(cfg, opts)
