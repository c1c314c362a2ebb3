"""ThroughputModel: the paper's formulas and the offline fit."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pivot.sched import ThroughputModel
from pivot.sched.throughput import load_terms

M = ThroughputModel(A=2e-6, B=0.012, C=1.5e-4, D=0.004)


def test_formulas_by_hand() -> None:
    assert M.latency(10, 1000) == pytest.approx(2e-6 * 1000 + 0.012 + 0.004)
    assert M.latency(200, 1000) == pytest.approx(2e-6 * 1000 + 1.5e-4 * 200 + 0.004)
    assert M.throughput(0, 0) == 0.0
    assert M.throughput(10, 1000) == pytest.approx(10 / 0.018)
    expected = 11 / (2e-6 * 1500 + 0.012 + 0.004) - 10 / 0.018
    assert M.gain(10, 1000, 500) == pytest.approx(expected)
    assert M.gain(0, 0, 100) == pytest.approx(1 / (2e-6 * 100 + 0.016))


@pytest.mark.parametrize(
    "n,tok", [(0, 0), (0, 700), (10, 1000), (79, 5000), (80, 5000), (200, 10**5)]
)
def test_load_terms_by_hand(n: int, tok: int) -> None:
    """T_i and base = latency(n + 1, tok) on both sides of the knee B / C = 80."""
    thr, base = load_terms(2e-6, 0.012, 1.5e-4, 0.004, n, tok)
    assert thr == (pytest.approx(n / (2e-6 * tok + max(0.012, 1.5e-4 * n) + 0.004)) if n else 0.0)
    assert base == pytest.approx(2e-6 * tok + max(0.012, 1.5e-4 * (n + 1)) + 0.004)
    assert (
        M.gain(n, tok, 300) == (n + 1) / (base + 2e-6 * 300) - thr
    )  # the form the dispatch scans use


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 500), st.integers(0, 10**6), st.integers(1, 10**5))
def test_gain_is_difference_of_throughputs(n: int, tok: int, ln: int) -> None:
    assert M.gain(n, tok, ln) == pytest.approx(
        M.throughput(n + 1, tok + ln) - M.throughput(n, tok), rel=1e-9, abs=1e-9
    )


def test_fit_recovers_constants() -> None:
    samples = [
        (n, t, M.latency(n, t))
        for n in (1, 4, 16, 32, 64, 80, 128, 256)
        for t in (0, 5_000, 50_000, 200_000)
    ]
    fit = ThroughputModel.fit(samples)
    for n, t, lat in samples:
        assert fit.latency(n, t) == pytest.approx(lat, rel=1e-6)
    assert fit.A == pytest.approx(M.A, rel=1e-4) and fit.C == pytest.approx(M.C, rel=1e-3)
    assert fit.B + fit.D == pytest.approx(M.B + M.D, rel=1e-4)


def test_fit_with_knee_between_samples() -> None:
    samples = [(n, t, M.latency(n, t)) for n in (1, 10, 50, 120, 200) for t in (0, 10_000, 90_000)]
    fit = ThroughputModel.fit(samples)
    for n, t, lat in samples:
        assert fit.latency(n, t) == pytest.approx(lat, rel=1e-3)


def test_bad_input_names_the_item() -> None:
    with pytest.raises(ValueError, match="ThroughputModel.A"):
        ThroughputModel(-1.0, 0.0, 0.0, 1.0)
    with pytest.raises(ValueError, match="sample 1"):
        ThroughputModel.fit([(1, 2, 0.1), (0, 2, 0.1), (3, 4, 0.2)])
    with pytest.raises(ValueError, match="at least 3"):
        ThroughputModel.fit([(1, 2, 0.1)])
    assert math.isfinite(ThroughputModel.fit([(1, 0, 0.1), (1, 0, 0.1), (1, 0, 0.1)]).D)


def test_fit_of_noisy_points_is_the_best_non_negative_model() -> None:
    """Points whose exact solution has C, D < 0 (as a noisy 1-step profile can time): the fit
    is non-negative, and no non-negative model on a brute-force grid fits them better."""
    samples = [(1, 16, 0.010), (1, 32, 0.025), (2, 64, 0.052), (2, 32, 0.040)]
    fit = ThroughputModel.fit(samples)
    sse = sum((fit.latency(n, t) - lat) ** 2 for n, t, lat in samples)
    grid = (
        sum((a * t + max(b, c * n) + d - lat) ** 2 for n, t, lat in samples)
        for a in [i * 2e-5 for i in range(61)]
        for b in [i * 2e-3 for i in range(11)]
        for c in [i * 2e-3 for i in range(11)]
        for d in [i * 2e-3 for i in range(11)]
    )
    assert sse <= min(grid) + 1e-12


def test_fit_refuses_samples_with_no_per_step_cost() -> None:
    """Latency proportional to tokens alone: the best non-negative fit is A only, which no
    decode step has; the fit says so instead of returning a model of zero per-step cost."""
    with pytest.raises(ValueError, match="no per-step cost"):
        ThroughputModel.fit([(1, 16, 0.010), (1, 32, 0.025), (2, 64, 0.052)])
