"""`ChaosPlanner` (`--planner.strategy chaos`): a random valid shift plan on every call, for soak
tests. Seeded by `planner.chaos_seed`; pure Python.

A plan shifts down a random subset of the up replicas (any role, running sequences or not) and
shifts up a random subset of the slots whose devices are then free, so shifts land while
sequences are mid-generation and while training is mid-step. What it keeps, so the job always
progresses:

- a training slot that is running a step or has its batch ready is never shifted down (the
  runtime never interrupts a step);
- a trainer that is down when its batch is ready shifts up (every replica on its pool goes
  down), as in every other strategy: the step cannot run otherwise;
- each inference role keeps at least one replica up after every plan: an *anchor* slot per
  role, pairwise disjoint and off the trainer's devices when it is locked or coming up, is
  never shifted down and is brought up (shifting down what holds its devices) if it is not up
  already. Rollout is needed to make samples, reward to judge them; without either the next
  batch never fills. When no disjoint anchors exist (a cluster too small for both roles beside
  a locked trainer) a role may be left without a replica until the trainer is unlocked.

What it always does, so a soak is certain to exercise migration rather than by chance: when an
up inference replica outside the locked slots holds a sequence known to be mid-generation (the
monitor reported tokens generated for it) that no earlier plan targeted, the plan shifts that
replica down (the one holding the most such sequences, the lowest id on a tie), so its
sequences are aborted with their KV and migrated. Each sequence is targeted once: targeting
again whatever resumed would abort it on every tick, and a slow replica's sequences would never
finish. It yields only where the anchors need that very replica.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Sequence

from pivot.config import PlannerConfig
from pivot.plan.planner import PlanTimings, ShiftPlan
from pivot.plan.snapshot import ClusterSnapshot
from pivot.sched.records import INFERENCE_ROLES, Replica, Role

MAX_ANCHOR_TRIES = 10_000
"""Bound on the anchor search (pairs of slots tried), so huge clusters stay cheap."""


class ChaosPlanner:
    def __init__(self, cfg: PlannerConfig) -> None:
        self.cfg, self.last_timings = cfg, PlanTimings()
        self.rng = random.Random(cfg.chaos_seed)
        self.targeted: set[int] = set()  # sequences a plan shifted down on purpose

    def plan(self, snap: ClusterSnapshot) -> ShiftPlan | None:
        t0 = time.perf_counter()
        plan = self._draw(snap)
        self.last_timings = PlanTimings(preprocess_s=time.perf_counter() - t0)
        if plan is not None:
            plan = ShiftPlan(plan.up_role, plan.up, plan.down, 0.0, 0.0, self.last_timings)
        return plan

    def _draw(self, snap: ClusterSnapshot) -> ShiftPlan | None:
        rng, by_id, held = self.rng, snap.by_id, snap.holders()
        train = snap.train_slot
        locked: set[int] = set()  # never shifted down
        up: list[int] = []
        down: set[int] = set()
        up_role: Role | None = None
        if train is not None and snap.train_batch_ready:
            locked.add(train.replica_id)
            if not snap.train_active:
                up_role = Role.TRAIN
                up.append(train.replica_id)
                down |= {held[d] for d in train.devices if d in held}
        reserved = {d for rid in locked for d in by_id[rid].devices}
        target = self._mid_generation(snap, locked | down)
        if target is not None:
            down.add(target)
        for anchor in self._anchors(snap, reserved, down):
            locked.add(anchor.replica_id)
            if anchor.replica_id not in snap.active:
                up.append(anchor.replica_id)
                down |= {held[d] for d in anchor.devices if d in held}
        down -= locked  # an anchor chosen over the target keeps it up
        if target in down:
            self.targeted.update(s.seq_id for s in snap.running[target])
        p_down, p_up = rng.random(), rng.random()
        for rid in sorted(snap.active - locked - down):
            if rng.random() < p_down:
                down.add(rid)
        busy = {d for rid in (snap.active - down) | set(up) for d in by_id[rid].devices}
        idle = [
            r for r in snap.replicas if r.replica_id not in snap.active and r.replica_id not in up
        ]
        rng.shuffle(idle)
        for slot in idle:
            if busy.isdisjoint(slot.devices) and rng.random() < p_up:
                up.append(slot.replica_id)
                busy |= set(slot.devices)
        if not up and not down:
            return None
        return ShiftPlan(up_role, tuple(up), tuple(sorted(down)), 0.0, 0.0, PlanTimings())

    def _mid_generation(self, snap: ClusterSnapshot, skip: set[int]) -> int | None:
        """The up inference replica (not in `skip`) holding the most sequences with tokens
        generated that no plan targeted yet, lowest id first on a tie; None if there is none."""
        fresh = {
            rid: [s.seq_id for s in seqs if s.generated > 0 and s.seq_id not in self.targeted]
            for rid, seqs in snap.running.items()
            if rid not in skip and rid in snap.active
        }
        best = max(sorted(fresh), key=lambda rid: len(fresh[rid]), default=None)
        return best if best is not None and fresh[best] else None

    def _anchors(
        self, snap: ClusterSnapshot, reserved: set[int], going_down: set[int]
    ) -> list[Replica]:
        """One slot per inference role, pairwise disjoint and off `reserved`: up replicas that are
        not `going_down` first (in random order), or, one plan in four, any slot (the role's last
        replica then moves too). Roles without a feasible slot get none."""
        options: list[Sequence[Replica | None]] = []
        for role in INFERENCE_ROLES:
            slots = [s for s in snap.slots(role) if reserved.isdisjoint(s.devices)]
            self.rng.shuffle(slots)
            if self.rng.random() >= 0.25:
                slots.sort(
                    key=lambda s: s.replica_id not in snap.active or s.replica_id in going_down
                )
            options.append([*slots, None])
        best: list[Replica] = []
        for combo in itertools.islice(itertools.product(*options), MAX_ANCHOR_TRIES):
            chosen = [s for s in combo if s is not None]
            devices = [d for s in chosen for d in s.devices]
            if len(devices) == len(set(devices)) and len(chosen) > len(best):
                best = chosen
                if len(best) == len(INFERENCE_ROLES):
                    break
        return best
