"""The steady-state window (`SimOptions.warmup_steps`): what it measures and what it releases."""
from __future__ import annotations

import dataclasses

import pytest

from pivot.sim import SimOptions, simulate
from pivot.sim.deploy import Allocation, deployment
from pivot.sim.report import critical_path_s
from tests.sim.conftest import small_cfg


def _alloc(name: str) -> Allocation | None:
    return Allocation(2, 3) if name == "disaggregated" else None


@pytest.mark.parametrize("name", ["colocated", "disaggregated", "pivot"])
def test_window_counts_the_measured_steps_only_and_keeps_its_bound(name: str, opts: SimOptions) -> None:
    res = simulate(deployment(small_cfg(), name, _alloc(name)), dataclasses.replace(opts, steps=4, warmup_steps=2))
    tokens = sum(s.prompt_len + s.response_len + s.judge_prompt_len + s.judge_len
                 for st in (2, 3) for s in res.samples[st])
    assert res.throughput == pytest.approx(tokens / (res.step_end_s[3] - res.step_end_s[1]))
    assert 0 < critical_path_s(res) <= res.measured_s * (1 + 1e-9)


@pytest.mark.parametrize(("name", "beyond"), [("colocated", 0), ("disaggregated", 2), ("pivot", 2)])
def test_steady_state_keeps_releasing_prompts_within_the_staleness(name: str, beyond: int, opts: SimOptions) -> None:
    cfg = deployment(small_cfg(), name, _alloc(name))
    whole = simulate(cfg, opts)
    steady = simulate(cfg, dataclasses.replace(opts, warmup_steps=1))
    assert sorted(whole.samples) == list(range(opts.steps))
    assert sorted(steady.samples) == list(range(opts.steps + beyond))  # staleness 2; colocated on-policy
    assert len(steady.step_end_s) == opts.steps


def test_warmup_must_leave_a_measured_step() -> None:
    with pytest.raises(ValueError, match="warmup_steps=3"):
        SimOptions(steps=3, warmup_steps=3)
