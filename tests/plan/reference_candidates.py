"""The paper's Algorithm 1 (candidate set construction), transcribed line by line from its text
(../shared/paper/pivotrl-arxiv-2610.16866.txt, section 7.2), as the oracle of the vectorised
pivot/plan/candidates.py. Written from the paper alone, not from Pivot's code:

    1: D[0] <- 0; D[1..K] <- +inf          2: C[0..K] <- {}
    3: for all P_i in P do
    4:     D^ <- D; C^ <- C
    5:     for all j such that D[j] < +inf do
    6:         for e = 1, ..., min(r_i, K - j) do
    7:             d <- D[j] + phi_i; c <- C[j] u P_i(e)
    8:             D^[j + e] <- min{D^[j + e], d}
    9:             if d = D^[j + e] then C^[j + e] <- c      (equal penalty: the later one wins)
   10:     D <- D^; C <- C^
   12: return {C[k] | 1 <= k <= K, D[k] < +inf}

A plan C[j] is kept as the list of (pair, e) it uses, in the order the pairs were traversed;
a candidate's shift-up replicas are each used pair's first e, in that order, and its shift-down
replicas the union of the used pairs' down sets, ascending (the output convention the planner
shares). Slow on purpose: it copies whole plans.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pivot.plan.pairs import ShiftPair


@dataclass(frozen=True)
class Candidate:
    up: tuple[int, ...]
    down: tuple[int, ...]
    penalty: float


def build_candidates(pairs: Sequence[ShiftPair], K: int) -> list[Candidate]:
    D = [0.0] + [math.inf] * K
    C: list[list[tuple[int, int]]] = [[] for _ in range(K + 1)]
    for i, P in enumerate(pairs):
        D_hat, C_hat = list(D), [list(c) for c in C]
        for j in range(K + 1):
            if not D[j] < math.inf:
                continue
            for e in range(1, min(len(P.up), K - j) + 1):
                d, c = D[j] + P.penalty, C[j] + [(i, e)]
                D_hat[j + e] = min(D_hat[j + e], d)
                if d == D_hat[j + e]:
                    C_hat[j + e] = c
        D, C = D_hat, C_hat
    return [
        Candidate(
            tuple(u for i, e in C[k] for u in pairs[i].up[:e]),
            tuple(sorted({d for i, _ in C[k] for d in pairs[i].down})),
            D[k],
        )
        for k in range(1, K + 1)
        if D[k] < math.inf
    ]
