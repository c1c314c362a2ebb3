"""Planner step 4: evaluate a candidate by simulating its migration with the scheduler's code.

    T = (N_ro + N_rm) / (N_ro / T_ro + N_rm / T_rm)        (N: running + queued sequences)
    B = H * (T_cand - T_cur) - phi

`CandidateEvaluator` applies the candidate's shift down and shift up (Algorithms 3-4) to a
what-if copy of each role's scheduler state (`ShiftAwareScheduler.what_if`: the scheduler's
decisions, bit for bit, without copying its per-sequence tables per candidate) and reads the
role's throughput after migration. Results are cached per (role, down set, up set), so candidates
sharing a role's change pay for it once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pivot.plan.candidates import Candidate
from pivot.plan.pairs import role_rate
from pivot.plan.snapshot import ClusterSnapshot
from pivot.sched.records import INFERENCE_ROLES, Role
from pivot.sched.scheduler import ShiftAwareScheduler
from pivot.sched.trial import TrialBase


def overall_throughput(n_ro: int, t_ro: float, n_rm: int, t_rm: float) -> float:
    """Weighted harmonic mean of the rollout and reward throughputs (paper eq. 1).

    A role with no sequences does not count; a role with sequences and no throughput makes
    the whole pipeline stall (T = 0).
    """
    if n_ro + n_rm <= 0:
        return 0.0
    denom = 0.0
    for n, t in ((n_ro, t_ro), (n_rm, t_rm)):
        if n > 0:
            if t <= 0:
                return 0.0
            denom += n / t
    return (n_ro + n_rm) / denom


def benefit(horizon_s: float, t_cand: float, t_cur: float, penalty: float) -> float:
    """Expected tokens gained over the horizon minus those lost while shifting."""
    return horizon_s * (t_cand - t_cur) - penalty


class CandidateEvaluator:
    """Overall throughput before and after each candidate, for one snapshot."""

    def __init__(
        self, snap: ClusterSnapshot, scheds: Mapping[str, ShiftAwareScheduler], binary: bool = False
    ) -> None:
        self._scheds, self._binary = scheds, binary
        self._role_of = {r.replica_id: r.role for r in snap.replicas}
        self._n = {role: scheds[role].num_sequences() for role in INFERENCE_ROLES}
        self._rate: dict[str, float] = {
            role: role_rate(scheds[role], binary) for role in INFERENCE_ROLES
        }
        self._cache: dict[tuple[str, tuple[int, ...], tuple[int, ...]], float] = {}
        self._bases: dict[str, TrialBase] = {}  # built on first use: a role may never change
        self.current = self._overall(self._rate)

    def throughput_after(self, cand: Candidate) -> float:
        rates: dict[str, float] = {
            role: self._role_after(role, cand.down, cand.up) for role in INFERENCE_ROLES
        }
        return self._overall(rates)

    def _role_after(self, role: Role, down: Iterable[int], up: Iterable[int]) -> float:
        d = tuple(sorted(r for r in down if self._role_of[r] == role))
        u = tuple(sorted(r for r in up if self._role_of[r] == role))
        if not d and not u:
            return self._rate[role]
        key = (role, d, u)
        if key not in self._cache:
            base = self._bases.get(role)
            if base is None:
                base = self._bases[role] = self._scheds[role].what_if()
            sim = base.run(d, u)
            self._cache[key] = float(sim.busy()) if self._binary else sim.throughput()
        return self._cache[key]

    def _overall(self, rates: Mapping[str, float]) -> float:
        return overall_throughput(
            self._n[Role.ROLLOUT], rates[Role.ROLLOUT], self._n[Role.REWARD], rates[Role.REWARD]
        )
