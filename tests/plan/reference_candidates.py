"""REFERENCE (frozen, pure-Python) copy of the candidate DP, kept for the equivalence test of
the vectorised pivot/plan/candidates.py.

Planner step 3: the candidate set by dynamic programming (paper Algorithm 1, Appendix D).

D[j] is the least penalty to shift up exactly j replicas; each pair is used at most once and
contributes its first e replicas (1 <= e <= r_i) while paying its whole penalty once. On equal
penalty the later transition in traversal order wins (Appendix D.2). One candidate per
reachable j in 1..max_up, in ascending j. Plans are kept as back-pointer chains so a
transition is O(1); the DP is O(K * I).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

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


def build_candidates(pairs: Sequence[ShiftPair], max_up: int) -> list[Candidate]:
    if max_up < 0:
        raise ValueError(f"build_candidates: max_up must be >= 0, got {max_up}")
    for i, p in enumerate(pairs):
        if not p.up or not p.penalty >= 0:
            raise ValueError(
                f"build_candidates: pair {i} needs up replicas and a penalty >= 0, got {p}"
            )
    K = max_up
    best = [0.0] + [math.inf] * K
    plan: list[tuple | None] = [None] * (K + 1)  # (pair index, e, parent chain)
    reach = 0  # highest reachable j so far
    for i, p in enumerate(pairs):
        nbest, nplan = best[:], plan[:]
        r, phi = len(p.up), p.penalty
        for j in range(reach + 1):
            dj = best[j]
            if dj == math.inf:
                continue
            d, chain = dj + phi, plan[j]
            for e in range(1, min(r, K - j) + 1):
                if d <= nbest[j + e]:
                    nbest[j + e], nplan[j + e] = d, (i, e, chain)
        best, plan = nbest, nplan
        reach = min(K, reach + r)
    out = []
    for k in range(1, K + 1):
        if best[k] == math.inf:
            continue
        used: list[tuple[int, int]] = []
        node = plan[k]
        while node is not None:
            used.append((node[0], node[1]))
            node = node[2]
        used.reverse()
        up = tuple(u for i, e in used for u in pairs[i].up[:e])
        down = tuple(sorted({d for i, _ in used for d in pairs[i].down}))
        out.append(Candidate(up, down, best[k]))
    return out
