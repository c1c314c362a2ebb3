"""Inconsistent snapshots are rejected with an error naming the item."""

from __future__ import annotations

import pytest

from pivot.config import PlannerConfig
from pivot.plan import ClusterSnapshot, make_planner
from pivot.sched import Replica, SeqState, ThroughputModel
from tests.plan.fig8 import figure8

M = ThroughputModel(1e-6, 0.01, 2e-4, 0.005)


def test_device_roles_view() -> None:
    roles = figure8().device_roles()
    assert (
        roles[0] == ("reward", 100) and roles[16] == ("rollout", 16) and roles[30] == ("train", 200)
    )


def test_device_in_two_replicas() -> None:
    slots = (Replica(0, "rollout", (0,), 10, M), Replica(1, "reward", (0, 1), 10, M))
    with pytest.raises(ValueError, match="device 0 is in two replicas"):
        ClusterSnapshot(slots, frozenset({0, 1}))


def test_sequence_on_two_replicas() -> None:
    slots = (Replica(0, "rollout", (0,), 10, M), Replica(1, "rollout", (1,), 10, M))
    with pytest.raises(ValueError, match="sequence 5 is on two replicas"):
        ClusterSnapshot(slots, frozenset({0, 1}), {0: (SeqState(5, 1),), 1: (SeqState(5, 1),)})
    with pytest.raises(ValueError, match="sequence 5 is on two replicas"):
        ClusterSnapshot(
            slots, frozenset({0, 1}), {0: (SeqState(5, 1),)}, {"rollout": (SeqState(5, 1),)}
        )


def test_negative_length() -> None:
    slots = (Replica(0, "rollout", (0,), 10, M),)
    seq = SeqState(3, 1)
    seq.generated = -4
    with pytest.raises(ValueError, match="sequence 3 has a negative length"):
        ClusterSnapshot(slots, frozenset({0}), {0: (seq,)})


def test_other_inconsistencies() -> None:
    slots = (Replica(0, "rollout", (0,), 10, M), Replica(1, "rollout", (0, 1), 10, M))
    with pytest.raises(ValueError, match="rollout slots 0 and 1 overlap on device 0"):
        ClusterSnapshot(slots, frozenset())
    slots = (Replica(0, "rollout", (0,), 10, M),)
    with pytest.raises(ValueError, match="active replicas \\[4\\]"):
        ClusterSnapshot(slots, frozenset({4}))
    with pytest.raises(ValueError, match="replica 0, which is not up"):
        ClusterSnapshot(slots, frozenset(), {0: (SeqState(1, 1),)})
    with pytest.raises(ValueError, match="unknown devices \\[0\\]"):
        ClusterSnapshot(slots, frozenset(), devices=(5,))
    with pytest.raises(ValueError, match="shift_s\\['judge'\\] = 1.0"):
        ClusterSnapshot(slots, frozenset(), shift_s={"judge": 1.0})
    with pytest.raises(ValueError, match="shift_s\\['reward'\\] = -1.0"):
        ClusterSnapshot(slots, frozenset(), shift_s={"reward": -1.0})


def test_bad_snapshot_gives_no_plan() -> None:
    planner = make_planner(PlannerConfig())
    with pytest.raises(ValueError):
        planner.plan(
            ClusterSnapshot(
                (Replica(0, "rollout", (0,), 10, M), Replica(0, "reward", (1,), 10, M)), frozenset()
            )
        )
