"""The chaos strategy: over random cluster states, every plan it issues is one the runtime can
execute, keeps the trainer's step, brings a ready trainer up, and leaves each inference role a
replica whenever the cluster has room for one of each beside the trainer."""

from __future__ import annotations

import itertools
import random

import pytest

from pivot.config import PlannerConfig
from pivot.plan import ClusterSnapshot, Role, make_planner
from pivot.plan.chaos import ChaosPlanner
from pivot.sched import Replica, SeqState, ThroughputModel

MODEL = ThroughputModel(A=1e-6, B=0.010, C=2e-4, D=0.005)


def tiled(role: Role, tp: int, world: int, first_id: int) -> list[Replica]:
    return [
        Replica(first_id + i, role, tuple(range(s, s + tp)), 4096, MODEL)
        for i, s in enumerate(range(0, world - tp + 1, tp))
    ]


def random_state(rng: random.Random) -> ClusterSnapshot:
    """A cluster of 1-8 devices with slots tiled as the runtime tiles them, a random valid set of
    up slots, sequences on the up inference replicas and in the queues, a random trainer state."""
    world = rng.randint(1, 8)
    rollout = tiled(Role.ROLLOUT, rng.choice([1, 2]) if world > 1 else 1, world, 0)
    reward = tiled(Role.REWARD, rng.choice([1, 2]) if world > 1 else 1, world, 100)
    train_devices = rng.randint(0, world)
    train = (
        [Replica(999, Role.TRAIN, tuple(range(world - train_devices, world)))]
        if train_devices
        else []
    )
    slots = rollout + reward + train
    active: set[int] = set()
    busy: set[int] = set()
    for slot in rng.sample(slots, len(slots)):
        if busy.isdisjoint(slot.devices) and rng.random() < 0.6:
            active.add(slot.replica_id)
            busy |= set(slot.devices)
    ids = itertools.count()
    running = {
        r.replica_id: tuple(
            SeqState(next(ids), 10, rng.randint(0, 50)) for _ in range(rng.randint(0, 3))
        )
        for r in rollout + reward
        if r.replica_id in active
    }
    queues = {
        role: tuple(SeqState(next(ids), 10) for _ in range(rng.randint(0, 3)))
        for role in ("rollout", "reward")
    }
    return ClusterSnapshot(
        tuple(slots),
        frozenset(active),
        running,
        queues,
        train_batch_ready=rng.random() < 0.4,
        devices=tuple(range(world)),
    )


def room_for_both(snap: ClusterSnapshot, reserved: set[int]) -> bool:
    """Brute force: a rollout slot and a reward slot, disjoint, both off `reserved`."""
    return any(
        set(a.devices).isdisjoint(b.devices) and reserved.isdisjoint(a.devices + b.devices)
        for a in snap.slots(Role.ROLLOUT)
        for b in snap.slots(Role.REWARD)
    )


def up_roles_after(snap: ClusterSnapshot, up: tuple[int, ...], down: tuple[int, ...]) -> set[str]:
    by_id = snap.by_id
    return {by_id[rid].role for rid in (set(snap.active) - set(down)) | set(up)}


@pytest.mark.parametrize("chunk", range(4))
def test_plans_are_valid_on_random_cluster_states(chunk: int) -> None:
    issued = shifted_busy = 0
    for seed in range(chunk * 250, (chunk + 1) * 250):
        rng = random.Random(seed)
        planner = ChaosPlanner(PlannerConfig(strategy="chaos", chaos_seed=seed))
        for _ in range(3):
            snap = random_state(rng)
            plan = planner.plan(snap)
            by_id, train = snap.by_id, snap.train_slot
            locked_train = train is not None and snap.train_batch_ready
            reserved = set(train.devices) if locked_train else set()
            if plan is None:  # nothing to change: only when no role lacks a replica it could get
                assert not (locked_train and not snap.train_active)
                continue
            issued += 1
            assert set(plan.down) <= snap.active, "shifts down a slot that is not up"
            assert not set(plan.up) & snap.active, "shifts up a slot that is up"
            assert len(set(plan.up)) == len(plan.up) and len(set(plan.down)) == len(plan.down)
            staying = snap.active - set(plan.down)
            devices = [d for rid in [*staying, *plan.up] for d in by_id[rid].devices]
            assert len(devices) == len(set(devices)), f"a device in two replicas after {plan}"
            if locked_train:
                assert train.replica_id not in plan.down, "interrupts a training step"
                assert snap.train_active or train.replica_id in plan.up, (
                    "a ready trainer stays down"
                )
            if room_for_both(snap, reserved):
                assert {Role.ROLLOUT, Role.REWARD} <= up_roles_after(snap, plan.up, plan.down), (
                    snap,
                    plan,
                )
            shifted_busy += any(snap.running.get(rid) for rid in plan.down)
    assert issued > 500 and shifted_busy > 100  # it does shift, and it does hit running sequences


def test_seeded_and_every_role_and_slot_is_shifted() -> None:
    rng = random.Random(7)
    snaps = [random_state(rng) for _ in range(300)]
    runs = []
    for _ in range(2):
        planner = make_planner(PlannerConfig(strategy="chaos", chaos_seed=3))
        runs.append([planner.plan(s) for s in snaps])
    assert [(p.up, p.down) if p else None for p in runs[0]] == [
        (p.up, p.down) if p else None for p in runs[1]
    ]
    other = make_planner(PlannerConfig(strategy="chaos", chaos_seed=4))
    assert [(p.up, p.down) if p else None for p in (other.plan(s) for s in snaps)] != [
        (p.up, p.down) if p else None for p in runs[0]
    ]
    moved = {
        (s.by_id[rid].role, up)
        for s, p in zip(snaps, runs[0])
        if p
        for up, ids in ((True, p.up), (False, p.down))
        for rid in ids
    }
    assert moved == {(role, up) for role in Role for up in (True, False)}


def test_four_ranks_as_the_tiny_job_keeps_both_roles_through_many_plans() -> None:
    """The soak's cluster (4 ranks, TP=1, trainer on rank 3) driven by its own plans: each plan
    applied in turn, with the trainer's batch readiness flipping at random."""
    rollout, reward = tiled(Role.ROLLOUT, 1, 4, 0), tiled(Role.REWARD, 1, 4, 4)
    train = Replica(8, Role.TRAIN, (3,))
    slots = (*rollout, *reward, train)
    planner, rng = ChaosPlanner(PlannerConfig(strategy="chaos", chaos_seed=1)), random.Random(1)
    active = frozenset({0, 5})
    shifts = 0
    for _ in range(2000):
        snap = ClusterSnapshot(
            slots, active, train_batch_ready=rng.random() < 0.3, devices=(0, 1, 2, 3)
        )
        plan = planner.plan(snap)
        if plan is None:
            continue
        shifts += len(plan.up) + len(plan.down)
        active = frozenset((active - set(plan.down)) | set(plan.up))
        ClusterSnapshot(slots, active)  # validates: no device in two replicas
        assert {Role.ROLLOUT, Role.REWARD} <= {snap.by_id[rid].role for rid in active}
    assert shifts > 2000


def test_shifts_down_a_replica_with_sequences_mid_generation_once() -> None:
    """A sequence known to be mid-generation (tokens generated) makes its replica go down in the
    plan, so a soak migrates for certain; each sequence is targeted once (no livelock)."""
    reps = [Replica(i, Role.ROLLOUT, (i,), 4096, MODEL) for i in (0, 1)]
    reps += [Replica(100 + i, Role.REWARD, (2 + i,), 4096, MODEL) for i in (0, 1)]
    running = {0: (), 1: (SeqState(7, 10, 3),), 100: ()}
    snap = ClusterSnapshot(tuple(reps), frozenset({0, 1, 100}), running, {}, devices=(0, 1, 2, 3))
    hits = 0
    for seed in range(200):
        planner = ChaosPlanner(PlannerConfig(strategy="chaos", chaos_seed=seed))
        plan = planner.plan(snap)
        hit = plan is not None and 1 in plan.down
        hits += hit
        assert planner.targeted == ({7} if hit else set())
    # random plans alone shift replica 1 down about half the time; the anchor of rollout takes
    # replica 1 itself in at most a quarter of the plans
    assert hits >= 0.8 * 200, hits
