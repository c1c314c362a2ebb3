"""Bounded step 4: exact up to `max_evaluated` candidates (or the time budget), a consistent
subset beyond it."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pivot.config import ConfigError, PlannerConfig
from pivot.plan import PivotPlanner, Role, coarse_to_fine
from pivot.plan.search import within_budget
from tests.plan.test_fast_eval import random_snapshot

EXHAUSTIVE = 10**6


def plan_with(seed: int, budget: int) -> tuple[PivotPlanner, object]:
    planner = PivotPlanner(PlannerConfig(max_evaluated=budget, budget_s=0.0))
    return planner, planner.plan(random_snapshot(seed))


@pytest.mark.parametrize("seed", range(1, 25))
def test_exact_when_candidates_fit_the_budget(seed: int) -> None:
    full, want = plan_with(seed, EXHAUSTIVE)
    budget = max(2, full.last_num_candidates)
    bounded, got = plan_with(seed, budget)
    assert bounded.last_candidates == full.last_candidates
    assert len(full.last_candidates) == full.last_num_candidates
    assert got == want or (
        got is not None
        and want is not None
        and (got.up, got.down, got.benefit) == (want.up, want.down, want.benefit)
    )


@pytest.mark.parametrize("seed", range(1, 40))
@pytest.mark.parametrize("budget", [2, 3, 5])
def test_small_budget_picks_an_evaluated_best(seed: int, budget: int) -> None:
    full, _ = plan_with(seed, EXHAUSTIVE)
    exact = {c: b for c, b in full.last_candidates}
    planner, plan = plan_with(seed, budget)
    assert planner.last_num_candidates == full.last_num_candidates
    assert len(planner.last_candidates) == min(budget, full.last_num_candidates)
    ks = [c.k for c, _ in planner.last_candidates]
    assert ks == sorted(set(ks))
    for c, b in planner.last_candidates:  # evaluated benefits are the exhaustive ones
        assert exact[c] == b
    if len(exact) > budget:  # the smallest and the largest k are always evaluated
        assert ks[0] == min(c.k for c in exact) and ks[-1] == max(c.k for c in exact)
    if plan is None:
        assert all(b <= 0 for _, b in planner.last_candidates) or not planner.last_candidates
        return
    assert plan.num_evaluated == len(planner.last_candidates) and plan.num_candidates == len(exact)
    assert plan.benefit in exact.values()
    assert all(b <= plan.benefit for _, b in planner.last_candidates)
    if plan.up_role != Role.TRAIN:
        assert plan.benefit > 0


@pytest.mark.parametrize("seed", range(1, 10))
def test_search_is_deterministic(seed: int) -> None:
    a, pa = plan_with(seed, 3)
    b, pb = plan_with(seed, 3)
    assert a.last_candidates == b.last_candidates
    assert (pa is None) == (pb is None)
    if pa is not None:
        assert (pa.up, pa.down, pa.benefit) == (pb.up, pb.down, pb.benefit)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(1, 2000), min_size=1, max_size=120, unique=True),
    st.integers(2, 12),
    st.randoms(use_true_random=False),
)
def test_coarse_to_fine_calls(ks: list[int], budget: int, rnd) -> None:  # noqa: ANN001
    ks.sort()
    scores = [rnd.uniform(-5, 5) for _ in ks]
    calls: list[int] = []

    def score(i: int) -> float:
        calls.append(i)
        return scores[i]

    got = coarse_to_fine(ks, budget, score)
    assert len(calls) == len(set(calls)) == len(got) == min(budget, len(ks))
    assert all(got[i] == scores[i] for i in got)
    assert 0 in got and len(ks) - 1 in got
    again: list[int] = []
    coarse_to_fine(ks, budget, lambda i: again.append(i) or scores[i])
    assert again == calls


def test_coarse_to_fine_finds_a_unimodal_peak() -> None:
    ks = list(range(1, 769))
    got = coarse_to_fine(ks, 12, lambda i: -abs(i - 500))
    assert abs(max(got, key=got.get) - 500) <= len(ks) // 32  # 6 bisections of the coarse bracket


def test_max_evaluated_is_validated() -> None:
    with pytest.raises(ConfigError, match="planner.max_evaluated"):
        PlannerConfig(max_evaluated=1)
    with pytest.raises(ConfigError, match="planner.budget_s"):
        PlannerConfig(budget_s=-1.0)
    assert PlannerConfig().max_evaluated == 0  # no cap by default: the time budget decides


class Clock:
    """A clock each score advances by `cost` seconds (no real time in the test)."""

    def __init__(self, cost: float) -> None:
        self.t, self.cost = 0.0, cost

    def __call__(self) -> float:
        return self.t

    def score(self, i: int) -> float:
        self.t += self.cost
        return -abs(i - 17)


@pytest.mark.parametrize("budget_s", [0.0, 40.0, 1e9])
def test_within_budget_is_exhaustive_when_the_whole_set_fits(budget_s: float) -> None:
    clock = Clock(1.0)
    calls: list[int] = []
    got = within_budget(
        list(range(1, 41)), 0, budget_s, lambda i: calls.append(i) or clock.score(i), clock
    )
    assert sorted(got) == list(range(40)) and sorted(calls) == list(range(40))
    assert all(got[i] == -abs(i - 17) for i in got)


@pytest.mark.parametrize("budget_s, want", [(39.0, 39), (5.0, 5), (0.5, 2)])
def test_within_budget_scores_what_the_budget_affords(budget_s: float, want: int) -> None:
    """40 candidates at 1 s each: the largest k's measures the cost; the rest of the search is
    coarse-to-fine with the count the budget affords, never re-scoring the two ends."""
    clock = Clock(1.0)
    calls: list[int] = []
    got = within_budget(
        list(range(1, 41)), 0, budget_s, lambda i: calls.append(i) or clock.score(i), clock
    )
    assert calls[:2] == [0, 39] and len(calls) == len(set(calls)) == len(got) == want


def test_within_budget_keeps_a_cap() -> None:
    clock = Clock(0.0)
    got = within_budget(list(range(1, 41)), 8, 10.0, clock.score, clock)
    assert len(got) == 8 and 0 in got and 39 in got
