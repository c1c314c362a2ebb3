"""`ShiftTimer`: measured shift durations, the tau_shift of the planner's penalty (paper §7, step 2).

A plan that shifts replicas down to bring slots of one role up leaves those devices serving
nobody from its start until its last shift completes (releases, then the up role's GPS Read and
join); that span is the tau_shift the planner multiplies with the throughput it gives up. The
shift executor reports each plan's start and each completed shift, the timer keeps the running
mean of the spans per role brought up, and the host puts the means in the planner's snapshot.
Plans that shift nothing down are not timed: their penalty is 0 whatever tau_shift is. The
runtime times with its monotonic clock, the simulator with its simulated one, so a replica
that is slow to shift (a TP8 122B GenRM) is priced by what its shifts have cost.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass
class _OpenPlan:
    role: str
    start: float
    left: set[int]
    """Replicas of the plan whose shift has not completed yet."""


class ShiftTimer:
    def __init__(self) -> None:
        self._open: list[_OpenPlan] = []
        self._total: dict[str, float] = {}
        self._count: dict[str, int] = {}

    def started(self, role: str, rids: Iterable[int], now: float) -> None:
        """A plan bringing up slots of `role` started at `now`, shifting `rids` (up and down)."""
        self._open.append(_OpenPlan(role, now, set(rids)))

    def completed(self, rids: Iterable[int], now: float) -> None:
        """Shifts of `rids` completed at `now`; a plan whose last shift this was is timed."""
        done = set(rids)
        still: list[_OpenPlan] = []
        for p in self._open:
            p.left -= done
            if p.left:
                still.append(p)
            else:
                self._total[p.role] = self._total.get(p.role, 0.0) + now - p.start
                self._count[p.role] = self._count.get(p.role, 0) + 1
        self._open = still

    def means(self) -> dict[str, float]:
        """Mean seconds of the timed plans of each role brought up (roles not timed yet are absent)."""
        return {role: self._total[role] / n for role, n in self._count.items()}
