"""`ReplicaLoad`: the mutable load of one replica slot inside the scheduler (its sequences,
N^seq and N^tok) and the terms T_i and dT derive from, recomputed by `load_terms` after every
change. Internal to the scheduler (`Placement` holds one per slot) and its what-if runs
(trial.py reads it)."""

from __future__ import annotations

from pivot.sched.records import Replica
from pivot.sched.throughput import load_terms


class ReplicaLoad:
    """One replica slot's load; dT(l) = n1 / (base + A*l) - thr where free >= l."""

    __slots__ = (
        "rid",
        "A",
        "B",
        "C",
        "D",
        "cap",
        "n",
        "tok",
        "thr",
        "ver",
        "active",
        "seqs",
        "n1",
        "base",
        "free",
    )

    def __init__(self, spec: Replica, active: bool) -> None:
        m = spec.model
        if m is None:
            raise ValueError(f"ReplicaLoad: replica {spec.replica_id} has no throughput model")
        self.rid, self.cap, self.active = spec.replica_id, spec.kv_capacity, active
        self.A, self.B, self.C, self.D = m.A, m.B, m.C, m.D
        self.n = self.tok = self.ver = 0
        self.thr = 0.0
        self.seqs: dict[int, int] = {}  # seq id -> length held on this replica
        self.refresh()

    def refresh(self) -> None:
        """After n or tok changed: T_i (`thr`) and the dispatch terms `n1`, `base`, `free`."""
        self.thr, self.base = load_terms(self.A, self.B, self.C, self.D, self.n, self.tok)
        self.n1 = self.n + 1
        self.free = self.cap - self.tok
        self.ver += 1
