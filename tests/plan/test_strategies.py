"""Static and rule-based strategies."""

from __future__ import annotations

from pivot.config import PlannerConfig
from pivot.plan import ClusterSnapshot, Role, make_planner
from pivot.sched import SeqState
from tests.plan.fig8 import TRAIN_ID, figure8


def test_static_splits_idle_training_evenly() -> None:
    plan = make_planner(PlannerConfig(strategy="static")).plan(figure8())
    assert plan is not None and plan.down == (TRAIN_ID,)
    assert plan.up == (106, 28, 29, 30, 31)  # GPUs 24-27 to reward, 28-31 to rollout


def test_static_brings_training_back() -> None:
    snap = figure8()
    snap = ClusterSnapshot(
        snap.replicas,
        (snap.active - {TRAIN_ID}) | {106},
        snap.running,
        snap.queues,
        train_batch_ready=True,
    )
    plan = make_planner(PlannerConfig(strategy="static")).plan(snap)
    assert plan is not None and plan.up_role == Role.TRAIN and plan.down == (106,)


def test_rule_based_shifts_up_a_full_role() -> None:
    snap = figure8()
    running = dict(snap.running)
    for rid in (100, 101, 102, 103):  # reward KV > 0.8
        running[rid] = tuple(SeqState(10_000 * rid + j, 1700) for j in range(100))
    snap = ClusterSnapshot(snap.replicas, snap.active, running, {}, train_batch_ready=False)
    plan = make_planner(PlannerConfig(strategy="rule_based")).plan(snap)
    assert plan is not None and plan.up_role == Role.REWARD and plan.down == (TRAIN_ID,)


def test_rule_based_shifts_down_an_idle_role() -> None:
    snap = figure8()
    running = {rid: s for rid, s in snap.running.items() if rid >= 100 or rid == 16}
    snap = ClusterSnapshot(snap.replicas, snap.active, running, snap.queues, train_batch_ready=True)
    plan = make_planner(PlannerConfig(strategy="rule_based")).plan(snap)
    assert plan is not None and plan.down == tuple(range(17, 24)) and plan.up == ()


def test_rule_based_never_takes_the_last_replica_of_a_role_with_sequences() -> None:
    snap = figure8(train_batch_ready=True)  # training runs: the trainer cannot be taken
    full = (100, 101, 102, 103, 105)  # reward on GPUs 0-15 and 20-23, KV > rule_high
    running = {rid: tuple(SeqState(10_000 * rid + j, 1700) for j in range(100)) for rid in full}
    active = (snap.active - set(range(17, 24))) | {
        105
    }  # rollout keeps one replica, GPU 16; 17-19 free
    planner = make_planner(PlannerConfig(strategy="rule_based"))
    lone = {
        **running,
        16: (SeqState(1, 300, 9000),),
    }  # one long rollout: utilisation far below rule_low
    assert (
        planner.plan(ClusterSnapshot(snap.replicas, active, lone, {}, train_batch_ready=True))
        is None
    )
    idle = {**running, 16: ()}
    plan = planner.plan(ClusterSnapshot(snap.replicas, active, idle, {}, train_batch_ready=True))
    assert plan is not None and plan.up_role == Role.REWARD and plan.down == (16,)
