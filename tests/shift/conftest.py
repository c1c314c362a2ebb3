"""The cluster of the shift tests: 8 devices on 2 hosts of 4; rollout TP2 slots are replicas 0-3
(devices 01 23 45 67), reward TP4 slots replicas 4-5 (0123 4567), training replica 6 on 4-7."""

from __future__ import annotations

from pivot.dist import ClusterSpec, SlotTable
from pivot.sched import ThroughputModel
from pivot.shift import ReplicaTable

MODEL = ThroughputModel(1e-8, 1e-3, 1e-4, 1e-2)


def table(
    world: int = 8, per_host: int = 4, tp: tuple[int, int] = (2, 4), train: int = 4
) -> ReplicaTable:
    slots = SlotTable.build(ClusterSpec(world, 0, per_host), tp[0], tp[1], train)
    return ReplicaTable.build(
        slots, world, {"rollout": 100, "reward": 200}, {"rollout": MODEL, "reward": MODEL}
    )
