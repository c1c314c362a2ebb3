"""Algorithm 1 against brute force, and the Figure 8 candidates."""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pivot.plan import ShiftPair, build_candidates


def brute_force(pairs: list[ShiftPair], max_up: int) -> dict[int, float]:
    """Least penalty for each exact count k over all subsets of pairs and prefix lengths."""
    best: dict[int, float] = {}
    for mask in itertools.product((0, 1), repeat=len(pairs)):
        used = [p for p, m in zip(pairs, mask) if m]
        lo, hi = len(used), min(sum(len(p.up) for p in used), max_up)
        cost = sum(p.penalty for p in used)
        for k in range(max(lo, 1), hi + 1):
            best[k] = min(best.get(k, math.inf), cost)
    return best


pair_st = st.builds(
    lambda n, phi: (n, phi),
    st.integers(1, 4),
    st.one_of(st.integers(0, 6).map(float), st.floats(0, 100)),
)


@settings(max_examples=150, deadline=None)
@given(st.lists(pair_st, max_size=7), st.integers(0, 20))
def test_equals_brute_force(spec: list[tuple[int, float]], max_up: int) -> None:
    pairs, nid = [], 0
    for i, (n, phi) in enumerate(spec):
        pairs.append(ShiftPair(tuple(range(nid, nid + n)), (1000 + i,), phi))
        nid += n
    pairs.sort(key=lambda p: p.penalty)
    cands = build_candidates(pairs, max_up)
    expect = brute_force(pairs, max_up)
    assert [c.k for c in cands] == sorted(expect)
    owner = {u: i for i, p in enumerate(pairs) for u in p.up}
    for c in cands:
        assert c.penalty == pytest.approx(expect[c.k])
        assert len(set(c.up)) == c.k
        used = sorted({owner[u] for u in c.up})
        for i in used:  # each used pair contributes a prefix of its replicas
            mine = [u for u in c.up if owner[u] == i]
            assert tuple(mine) == pairs[i].up[: len(mine)]
        assert c.penalty == pytest.approx(sum(pairs[i].penalty for i in used))
        assert c.down == tuple(sorted(d for i in used for d in pairs[i].down))


def test_ties_keep_the_later_transition() -> None:
    pairs = [ShiftPair((1,), (10,), 0.0), ShiftPair((2,), (11,), 0.0)]
    assert build_candidates(pairs, 2)[0].up == (2,)  # equal penalty: the later pair wins
    assert build_candidates(pairs, 2)[1].up == (1, 2)


def test_bad_pairs_rejected() -> None:
    with pytest.raises(ValueError, match="pair 0"):
        build_candidates([ShiftPair((), (), 0.0)], 3)
    with pytest.raises(ValueError, match="max_up"):
        build_candidates([], -1)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 6), st.sampled_from([0.0, 1.0, 2.0, 0.1, 0.2, 0.3, 7.5])),
        max_size=12,
    ),
    st.integers(0, 40),
)
def test_vectorised_dp_equals_the_papers_algorithm(
    spec: list[tuple[int, float]], max_up: int
) -> None:
    """Same candidates (replicas, down sets, penalties bit for bit) as the paper's Algorithm 1
    transcribed (tests/plan/reference_candidates.py), with many equal and float-rounded penalty
    sums (the paper's tie rule, line 9, decides)."""
    from tests.plan.reference_candidates import build_candidates as reference

    pairs, nid = [], 0
    for i, (n, phi) in enumerate(spec):
        pairs.append(ShiftPair(tuple(range(nid, nid + n)), (1000 + i, 2000 + i % 3), phi))
        nid += n
    pairs.sort(key=lambda p: p.penalty)
    got = [(c.up, c.down, c.penalty) for c in build_candidates(pairs, max_up)]
    assert got == [(c.up, c.down, c.penalty) for c in reference(pairs, max_up)]
