"""Planner step 4 under a budget: which candidates to simulate (an approximation beyond it).

The paper simulates every candidate (one per reachable replica count k). That is exact but
costs one migration simulation each, and there are O(devices) candidates. `within_budget` is
the default: every candidate while that fits a planning-time budget, judged from the measured
cost of the largest k's (CPU time of the planner's thread); past it, as many as the budget
affords, chosen by `coarse_to_fine`, which scores at most `budget` of them:

- all of them, in ascending k, when there are no more than `budget` (exact, the paper's step 4);
- otherwise a geometric spread of k from the smallest to the largest (both always included,
  half the budget), then bisection: split the wider unscored gap next to the best score so far
  (of equal widths, the one whose ends score higher, then the smaller k); when both its
  neighbours are scored, split the widest gap anywhere.

Deterministic: it depends only on `ks`, `budget` and the scores.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable, Sequence


def within_budget(
    ks: Sequence[int],
    cap: int,
    budget_s: float,
    score: Callable[[int], float],
    clock: Callable[[], float] = time.thread_time,
) -> dict[int, float]:
    """Score indices of the ascending `ks`: all of them (at most `cap`, 0 for no cap) if the
    measured cost of the largest k's score, times the count, fits `budget_s` (0: no limit);
    otherwise as many as it affords (at least 2) by `coarse_to_fine`, the two ends reused.
    `clock` is this thread's CPU time: other jobs on the machine, and the rank's own role work
    on its other threads, do not shrink the search."""
    m = len(ks)
    n = m if cap <= 0 else min(m, cap)
    if budget_s <= 0 or m <= 2:
        return coarse_to_fine(ks, max(n, 1), score)
    seen = {0: score(0)}  # both ends: coarse_to_fine scores them first
    t0 = clock()  # (not the first score: it also builds the what-if bases, once)
    seen[m - 1] = score(m - 1)
    per = clock() - t0  # the largest shift: the costliest migration to simulate
    if per * n > budget_s:
        n = max(2, min(n, int(budget_s / per) if per > 0 else n))

    def memo(i: int) -> float:
        got = seen.get(i)
        return score(i) if got is None else got

    return coarse_to_fine(ks, n, memo)


def coarse_to_fine(
    ks: Sequence[int], budget: int, score: Callable[[int], float]
) -> dict[int, float]:
    """Score indices of the ascending `ks` (at most `budget` calls); returns index -> score."""
    if budget < 1:
        raise ValueError(f"coarse_to_fine: budget must be >= 1, got {budget}")
    m = len(ks)
    if m <= budget:
        return {i: score(i) for i in range(m)}
    seen: dict[int, float] = {}
    lo, hi, n_coarse = max(ks[0], 1), ks[-1], max(2, budget // 2)
    for j in range(n_coarse):
        target = lo * (hi / lo) ** (j / (n_coarse - 1))
        i = min(bisect.bisect_left(ks, target), m - 1)
        if i > 0 and target - ks[i - 1] <= ks[i] - target:
            i -= 1  # nearest k, ties to the smaller
        if j == n_coarse - 1:
            i = m - 1  # the largest k even if float rounding lands next to it
        if i not in seen:
            seen[i] = score(i)
    while len(seen) < budget:
        order = sorted(seen)
        best = max(order, key=lambda i: (seen[i], -i))
        pos = order.index(best)
        around = order[max(pos - 1, 0) : pos + 2]  # best and its scored neighbours
        gaps = [(a, b) for a, b in zip(around, around[1:]) if b - a > 1]
        if not gaps:
            gaps = [(a, b) for a, b in zip(order, order[1:]) if b - a > 1]
        # the wider gap; of equal widths, the one whose outer end scores higher (then smaller k)
        a, b = max(gaps, key=lambda g: (g[1] - g[0], seen[g[0]] + seen[g[1]]))
        mid = (a + b) // 2
        seen[mid] = score(mid)
    return seen
