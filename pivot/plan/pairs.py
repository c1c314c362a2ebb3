"""Planner steps 1-2: pick the shift-up role, then the shift pairs that could free devices for it.

- `choose_up_role`: training if its next batch is ready (and it is down); otherwise the
  inference role with the larger tau = N_seq / T (running + queued over its modelled
  throughput; ties go to rollout); None when neither has work.
- `build_pairs`: group the up role's down slots with the up replicas holding their devices
  (connected components of "slot needs a device held by replica"). Each group is one
  `ShiftPair(up, down, penalty)`: `up` its slot ids in ascending order, `down` the replicas
  that must shift down to free them, penalty phi = sum over `down` of (tau_shift + tau_refill_i) * T_i
  (`penalty`).
  Slots on idle devices form one pair with no `down` and phi = 0. A trainer whose batch is
  ready is never shifted down. Pairs are sorted by ascending (penalty, first up id).
- `within_reserves`: whether a shift down leaves each inference role the devices outside the
  training slot it reserves (`planner.reserve_rollout`, `planner.reserve_reward`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pivot.plan.snapshot import ClusterSnapshot
from pivot.sched.records import INFERENCE_ROLES, Role
from pivot.sched.scheduler import ShiftAwareScheduler


@dataclass(frozen=True)
class ShiftPair:
    up: tuple[int, ...]
    """Ordered slots of the shift-up role this pair can activate (its first e are used)."""
    down: tuple[int, ...]
    """Up replicas (any other role, training included) that must shift down to free them."""
    penalty: float
    """phi = sum over `down` of (tau_shift + tau_refill_i) * T_i (`penalty`)."""


def refill_s(snap: ClusterSnapshot, rids: Iterable[int], share: float = 1.0) -> dict[int, float]:
    """Seconds to re-prefill the KV each replica of `rids` holds (prompt plus generated tokens of
    its running sequences), at its throughput model's compute cost per token C: a shift down
    aborts those sequences and their next replica recomputes them. The training slot has none.
    With KV-preserving migration the KV moves instead: `share` (`planner.kv_refill_share`) is
    what moving it costs as a share of recomputing it."""
    want = set(rids)
    return {
        r.replica_id: share * r.model.C * sum(s.length for s in snap.running.get(r.replica_id, ()))
        for r in snap.replicas
        if r.replica_id in want and r.model is not None
    }


def penalty(
    down: tuple[int, ...], rates: Mapping[int, float], refill: Mapping[int, float], tau_shift: float
) -> float:
    """phi of shifting `down` replicas: each stops serving for tau_shift (the measured duration of
    the shift, pivot/shift/timing.py) and its discarded KV costs `refill` seconds of recompute.
    The paper's phi is tau_shift * T_i alone, which departs here because with it the
    simulated 32B and 72B groups abort 1.4-4.2x as many sequences, re-prefill 2-8x as many
    tokens and run 2-6% slower, while on 1.5B and 7B the two are within 3% (docs/results.md)."""
    return sum((tau_shift + refill.get(h, 0.0)) * rates.get(h, 0.0) for h in down)


def role_rate(sched: ShiftAwareScheduler, binary: bool) -> float:
    """Aggregate throughput of a role; `binary` is the no-throughput-model ablation (1 per busy replica)."""
    if binary:
        return float(sum(1 for rid in sched.active_ids if sched.load(rid)[0] > 0))
    return sched.throughput()


def replica_rates(
    snap: ClusterSnapshot, scheds: Mapping[str, ShiftAwareScheduler], binary: bool
) -> dict[int, float]:
    """T_i of every up slot (training: its token rate)."""
    out: dict[int, float] = {}
    for sched in scheds.values():
        for rid in sched.active_ids:
            out[rid] = (
                (1.0 if sched.load(rid)[0] > 0 else 0.0)
                if binary
                else sched.replica_throughput(rid)
            )
    slot = snap.train_slot
    if slot is not None and snap.train_active:
        out[slot.replica_id] = (
            (1.0 if snap.train_throughput > 0 else 0.0) if binary else snap.train_throughput
        )
    return out


def choose_up_role(
    snap: ClusterSnapshot, scheds: Mapping[str, ShiftAwareScheduler], binary: bool = False
) -> Role | None:
    if snap.train_batch_ready and snap.train_slot is not None and not snap.train_active:
        return Role.TRAIN
    best, best_tau = None, 0.0
    for role in INFERENCE_ROLES:
        n, t = scheds[role].num_sequences(), role_rate(scheds[role], binary)
        tau = 0.0 if n == 0 else (math.inf if t <= 0 else n / t)
        if tau > best_tau:
            best, best_tau = role, tau
    return best


def training_pair(
    snap: ClusterSnapshot, rates: Mapping[int, float], tau_shift: float, share: float = 1.0
) -> ShiftPair:
    """The single pair that brings training up: every replica on its pool shifts down."""
    slot = snap.train_slot
    assert slot is not None
    held = snap.holders()
    down = tuple(sorted({held[d] for d in slot.devices if d in held}))
    return ShiftPair(
        (slot.replica_id,), down, penalty(down, rates, refill_s(snap, down, share), tau_shift)
    )


def build_pairs(
    snap: ClusterSnapshot,
    up_role: str,
    rates: Mapping[int, float],
    tau_shift: float,
    share: float = 1.0,
) -> list[ShiftPair]:
    held = snap.holders()
    train = snap.train_slot
    locked = {train.replica_id} if train is not None and snap.train_batch_ready else set()
    parent: dict[tuple[str, int], tuple[str, int]] = {}

    def find(x: tuple[str, int]) -> tuple[str, int]:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    free: list[int] = []
    ups: list[int] = []
    for slot in snap.slots(up_role):
        if slot.replica_id in snap.active:
            continue
        hs = {held[d] for d in slot.devices if d in held}
        if hs & locked:
            continue
        if not hs:
            free.append(slot.replica_id)
            continue
        ups.append(slot.replica_id)
        root = find(("u", slot.replica_id))
        for h in hs:
            parent[find(("h", h))] = root
            root = find(root)
    groups: dict[tuple[str, int], tuple[list[int], list[int]]] = {}
    for key in sorted(parent):
        u, d = groups.setdefault(find(key), ([], []))
        (u if key[0] == "u" else d).append(key[1])
    pairs = [ShiftPair(tuple(free), (), 0.0)] if free else []
    refill = refill_s(snap, (rid for _, d in groups.values() for rid in d), share)
    for u, d in groups.values():
        down = tuple(sorted(d))
        pairs.append(ShiftPair(tuple(sorted(u)), down, penalty(down, rates, refill, tau_shift)))
    pairs.sort(key=lambda p: (p.penalty, p.up[0]))
    return pairs


def within_reserves(
    snap: ClusterSnapshot, down: Iterable[int], reserves: Mapping[Role, int]
) -> bool:
    """Whether shifting `down` leaves every role of `reserves` at least its reserve of devices
    outside the training slot, or as many as it holds now where that is fewer (a role that
    has not reached its reserve may still lose replicas it holds on the training slot's
    devices). Devices on the training slot's pool are the trainer's to lend: they never count."""
    train = snap.train_slot
    pool = set(train.devices) if train is not None else set()
    gone = set(down)
    for role, reserve in reserves.items():
        if reserve <= 0:
            continue
        held = [len(set(r.devices) - pool) for r in snap.slots(role) if r.replica_id in snap.active]
        kept = [
            len(set(r.devices) - pool)
            for r in snap.slots(role)
            if r.replica_id in snap.active and r.replica_id not in gone
        ]
        if sum(kept) < min(reserve, sum(held)):
            return False
    return True
