"""The steady-state window (`SimOptions.warmup_steps`): what it measures and what it releases."""

from __future__ import annotations

import dataclasses

import pytest

from pivot.sim import SimOptions, simulate
from pivot.sim.deploy import Allocation, deployment
from pivot.sim.report import critical_path_s
from pivot.sim.window import Spread, Window, aligned_window, is_aligned, window_rate
from tests.sim.conftest import small_cfg


def _alloc(name: str) -> Allocation | None:
    return Allocation(2, 3) if name == "disaggregated" else None


@pytest.mark.parametrize("name", ["colocated", "disaggregated", "pivot"])
def test_window_counts_the_measured_steps_only_and_keeps_its_bound(
    name: str, opts: SimOptions
) -> None:
    res = simulate(
        deployment(small_cfg(), name, _alloc(name)),
        dataclasses.replace(opts, steps=4, warmup_steps=2),
    )
    tokens = sum(
        s.prompt_len + s.response_len + s.judge_prompt_len + s.judge_len
        for st in (2, 3)
        for s in res.samples[st]
    )
    assert res.throughput == pytest.approx(tokens / (res.step_end_s[3] - res.step_end_s[1]))
    per_step = [sum(s.tokens for s in res.samples[st]) for st in range(4)]
    assert res.throughput == pytest.approx(window_rate(res.step_end_s, per_step, Window(2, 2)))
    assert 0 < critical_path_s(res) <= res.measured_s * (1 + 1e-9)


@pytest.mark.parametrize(("name", "beyond"), [("colocated", 0), ("disaggregated", 2), ("pivot", 2)])
def test_steady_state_keeps_releasing_prompts_within_the_staleness(
    name: str, beyond: int, opts: SimOptions
) -> None:
    cfg = deployment(small_cfg(), name, _alloc(name))
    whole = simulate(cfg, opts)
    steady = simulate(cfg, dataclasses.replace(opts, warmup_steps=1))
    assert sorted(whole.samples) == list(range(opts.steps))
    assert sorted(steady.samples) == list(
        range(opts.steps + beyond)
    )  # staleness 2; colocated on-policy
    assert len(steady.step_end_s) == opts.steps


def test_warmup_must_leave_a_measured_step() -> None:
    with pytest.raises(ValueError, match="warmup_steps=3"):
        SimOptions(steps=3, warmup_steps=3)


# ---------------------------------------------------------------- period-aligned windows (pure)
def _bursty(periods: int, p: int = 3, gap: float = 30.0) -> list[float]:
    """Step ends of a run finishing steps in bursts of `p`, one second apart, every `gap` s:
    its rate is p steps per `gap` seconds."""
    return [gap * (k // p + 1) + k % p for k in range(periods * p)]


@pytest.mark.parametrize(("staleness", "measured"), [(0, 6), (1, 6), (2, 6), (3, 8), (6, 7)])
def test_aligned_window_is_whole_periods_after_the_warmup(staleness: int, measured: int) -> None:
    w = aligned_window(staleness)
    assert (w.warmup, w.measured, w.steps) == (4, measured, 4 + measured)
    assert is_aligned(w, staleness)
    assert aligned_window(2, min_warmup=5, min_measured=7) == Window(5, 9)


def test_aligned_window_of_a_bursty_run_gives_the_period_rate_and_the_old_one_did_not() -> None:
    ends, tokens = _bursty(5), [1.0] * 15
    assert window_rate(ends, tokens, aligned_window(2)) == pytest.approx(3 / 30)  # steps 4..9
    assert window_rate(ends, tokens, Window(5, 6)) == pytest.approx(3 / 30)  # any phase
    # the old `--steps 7 --warmup 3`: steps 3..6, one burst and a third, from the end of step 2
    old = window_rate(ends, tokens, Window(3, 4))
    assert old == pytest.approx(4 / (70 - 12)) and old < 0.7 * (3 / 30)
    assert not is_aligned(Window(3, 4), 2)


def test_window_rate_weights_each_step_by_its_tokens() -> None:
    ends, tokens = [10.0, 20.0, 40.0, 50.0], [5.0, 7.0, 100.0, 300.0]
    assert window_rate(ends, tokens, Window(1, 3)) == pytest.approx(407.0 / 40.0)
    assert window_rate(ends, tokens, Window(0, 2)) == pytest.approx(12.0 / 20.0)
    with pytest.raises(ValueError, match="has 4 steps"):
        window_rate(ends, tokens, Window(2, 3))


def test_spread_is_mean_and_range() -> None:
    s = Spread.of([1.03, 1.13, 1.11])
    assert (s.mean, s.lo, s.hi, s.n) == (pytest.approx(3.27 / 3), 1.03, 1.13, 3)
    assert s.fmt(".2f", "x") == "x1.09 (1.03-1.13)" and Spread.of([2.0]).fmt(".1f") == "2.0"
