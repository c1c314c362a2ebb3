"""The placement rule's two kernels (pivot/sched/dispatch.py) against the paper's rule written
out from DESIGN.md: largest dT_i = (N+1) / (A*(tok+l) + max(B, C*(N+1)) + D) - T_i among the
replicas with free KV >= l, ties to the smallest id, none -> -1. The oracle computes dT from
the raw loads (not from the precomputed terms) and compares exact floats, so it also pins the
terms' algebra to the formula."""

from __future__ import annotations

import random

import pytest

from pivot.sched.dispatch import TargetArrays, best_target
from pivot.sched.throughput import load_terms


def oracle(
    ln: int, targets: list[int], loads: list[tuple[float, float, float, float, int, int, int]]
) -> int:
    best, best_gain = -1, None
    for i in targets:
        a, b, c, d, n, tok, cap = loads[i]
        if cap - tok < ln:
            continue
        t_i = n / (a * tok + max(b, c * n) + d) if n else 0.0
        gain = (n + 1) / (a * tok + max(b, c * (n + 1)) + d + a * ln) - t_i
        if best_gain is None or gain > best_gain:
            best, best_gain = i, gain
    return best


def tables(
    loads: list[tuple[float, float, float, float, int, int, int]],
) -> tuple[list, list, list, list, list]:
    A, n1, base, thr, free = [], [], [], [], []
    for a, b, c, d, n, tok, cap in loads:
        t, bs = load_terms(a, b, c, d, n, tok)
        A.append(a)
        n1.append(n + 1)
        base.append(bs)
        thr.append(t)
        free.append(cap - tok)
    return A, n1, base, thr, free


@pytest.mark.parametrize("seed", range(40))
def test_both_kernels_follow_the_rule(seed: int) -> None:
    rng = random.Random(seed)
    models = [(2e-6, 0.012, 1.5e-4, 0.004), (1e-6, 0.010, 2e-4, 0.005), (0.0, 0.02, 0.0, 0.0)]
    one = rng.random() < 0.5  # one model for all (the numpy kernel's scalar-A form) or mixed
    loads = []
    for _ in range(rng.randint(1, 70)):
        a, b, c, d = models[0] if one else rng.choice(models)
        n = rng.choice([0, 0, 1, 2, 5, 20])  # repeated loads: exact ties
        tok = n * rng.choice([100, 100, 333])
        loads.append((a, b, c, d, n, tok, tok + rng.choice([0, 50, 400, 10_000])))
    A, n1, base, thr, free = tables(loads)
    targets = sorted(rng.sample(range(len(loads)), rng.randint(1, len(loads))))
    arr = TargetArrays(targets, A, n1, base, thr, free)
    for ln in [1, 50, 51, 399, 400, 401, 5000, 10_001]:
        want = oracle(ln, targets, loads)
        assert best_target(ln, targets, A, n1, base, thr, free) == want, ln
        assert arr.best(ln) == want, ln


def test_ties_go_to_the_smallest_id_and_nothing_fits_waits() -> None:
    loads = [(1e-6, 0.01, 2e-4, 0.005, 3, 300, 1000)] * 4
    A, n1, base, thr, free = tables(loads)
    for targets in ([0, 1, 2, 3], [2, 3]):
        assert best_target(10, targets, A, n1, base, thr, free) == targets[0]
        assert TargetArrays(targets, A, n1, base, thr, free).best(10) == targets[0]
        assert best_target(701, targets, A, n1, base, thr, free) == -1
        assert TargetArrays(targets, A, n1, base, thr, free).best(701) == -1
