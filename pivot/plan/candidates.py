"""Planner step 3: the candidate set by dynamic programming (paper Algorithm 1, Appendix D).

D[j] is the least penalty to shift up exactly j replicas; each pair is used at most once and
contributes its first e replicas (1 <= e <= r_i) while paying its whole penalty once. On equal
penalty the later transition in traversal order wins (Appendix D.2). One candidate per
reachable j in 1..max_up, in ascending j.

`CandidateTable` runs the DP with numpy, one vector step per (pair, e): for a target count t
the scalar loop's transitions arrive in ascending j, i.e. descending e, and `<=` keeps the
last, so taking e from r_i down to 1 with `<=` keeps the same one (same float additions, so the
same D and plans as the scalar loop in tests/plan/reference_candidates.py). Back-pointers are
tables (creator pair and e per count), so a candidate's replicas are only assembled when asked
for (`candidate(k)`): the planner evaluates a few of O(devices) candidates.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from pivot.plan.pairs import ShiftPair


@dataclass(frozen=True)
class Candidate:
    up: tuple[int, ...]
    """Slots to shift up (pairs in traversal order, each pair's first e)."""
    down: tuple[int, ...]
    """Replicas to shift down (union of the used pairs' down sets, ascending)."""
    penalty: float

    @property
    def k(self) -> int:
        return len(self.up)


class CandidateTable:
    """Algorithm 1 over `pairs` up to `max_up` replicas; `ks` lists the reachable counts."""

    def __init__(self, pairs: Sequence[ShiftPair], max_up: int) -> None:
        if max_up < 0:
            raise ValueError(f"build_candidates: max_up must be >= 0, got {max_up}")
        for i, p in enumerate(pairs):
            if not p.up or not p.penalty >= 0:
                raise ValueError(
                    f"build_candidates: pair {i} needs up replicas and a penalty >= 0, got {p}"
                )
        self.pairs, K = list(pairs), max_up
        best = np.full(K + 1, np.inf)
        best[0] = 0.0
        creator = np.full(K + 1, -1, dtype=np.int64)  # pair that set the current plan of each count
        self._e: list[np.ndarray] = []  # per pair: the e that reached each count (0: not updated)
        self._parent: list[np.ndarray] = []  # per pair: creator of the plan it extended
        for p in self.pairs:
            r = min(len(p.up), K)
            nbest, e_of = best.copy(), np.zeros(K + 1, dtype=np.int64)
            parent = np.full(K + 1, -1, dtype=np.int64)
            for e in range(r, 0, -1):
                d = best[: K + 1 - e] + p.penalty  # from j = t - e, for t = e..K
                take = np.isfinite(d) & (d <= nbest[e:])
                t = np.nonzero(take)[0]
                nbest[t + e] = d[t]
                e_of[t + e] = e
                parent[t + e] = creator[t]
            upd = e_of > 0
            creator = np.where(upd, len(self._e), creator)
            self._e.append(e_of)
            self._parent.append(parent)
            best = nbest
        self._best, self._creator = best, creator
        self.ks = [k for k in range(1, K + 1) if np.isfinite(best[k])]

    def penalty(self, k: int) -> float:
        return float(self._best[k])

    def candidate(self, k: int) -> Candidate:
        """The plan of the least penalty for exactly `k` replicas."""
        if not (1 <= k < len(self._best)) or not np.isfinite(self._best[k]):
            raise ValueError(f"candidate: k={k} is not reachable")
        used: list[tuple[int, int]] = []
        i, t = int(self._creator[k]), k
        while i >= 0:
            e = int(self._e[i][t])
            used.append((i, e))
            i, t = int(self._parent[i][t]), t - e
        used.reverse()
        pairs = self.pairs
        up = tuple(u for i, e in used for u in pairs[i].up[:e])
        down = tuple(sorted({d for i, _ in used for d in pairs[i].down}))
        return Candidate(up, down, float(self._best[k]))


def build_candidates(pairs: Sequence[ShiftPair], max_up: int) -> list[Candidate]:
    """Every candidate of Algorithm 1, in ascending k."""
    table = CandidateTable(pairs, max_up)
    return [table.candidate(k) for k in table.ks]
