"""The replica table and the replica states (pivot/shift/table.py).

Oracle for the table: the tiling rule written out by hand here (rollout, then reward slots, each
tiled host by host with its TP size, a TP larger than a host spanning whole hosts; the training
slot is the last `train.devices` devices), compared with both the runtime's construction and the
simulator's, for every paper preset in every deployment mode."""

from __future__ import annotations

import dataclasses

import pytest

from configs.presets import PAPER_WORLD, paper_preset
from pivot.dist import ClusterSpec, SlotTable
from pivot.shift import ReplicaStates, ReplicaTable, ShiftError, State
from pivot.sim import H20
from pivot.sim.costs import build_cluster
from tests.shift.conftest import MODEL, table

PAPER = list(PAPER_WORLD)


def expected(
    world: int, per_host: int, tps: dict[str, int], train: int
) -> list[tuple[str, int, tuple[int, ...]]]:
    out = []
    for role in ("rollout", "reward"):
        tp = tps[role]
        if tp <= per_host:
            groups = [
                list(range(h * per_host + k * tp, h * per_host + (k + 1) * tp))
                for h in range(world // per_host)
                for k in range(per_host // tp)
            ]
        else:
            groups = [list(range(s, s + tp)) for s in range(0, world, tp)]
        out += [(role, i, tuple(g)) for i, g in enumerate(groups)]
    return out + [("train", 0, tuple(range(world - train, world)))]


def rows(t: ReplicaTable) -> list[tuple[str, int, tuple[int, ...]]]:
    return [(*t.slot_of(r.replica_id), r.devices) for r in t.replicas]


def test_small_table_by_hand() -> None:
    t = table()
    assert rows(t) == [
        ("rollout", 0, (0, 1)),
        ("rollout", 1, (2, 3)),
        ("rollout", 2, (4, 5)),
        ("rollout", 3, (6, 7)),
        ("reward", 0, (0, 1, 2, 3)),
        ("reward", 1, (4, 5, 6, 7)),
        ("train", 0, (4, 5, 6, 7)),
    ]
    assert t.train_rid == 6 and t.rid("reward", 1) == 5 and t.role_of(5) == "reward"
    assert [r.kv_capacity for r in t.replicas] == [100] * 4 + [200] * 2 + [0]
    assert [r.replica_id for r in t.slots("rollout")] == [0, 1, 2, 3]


def test_no_training_pool_leaves_train_rid_past_the_end() -> None:
    t = table(train=0)
    assert t.train_rid == len(t.replicas) == 6 and t.slots("train") == []


@pytest.mark.parametrize("mode", ["pivot", "disaggregated", "colocated", "rr_colocated"])
@pytest.mark.parametrize("name", PAPER)
def test_runtime_and_simulator_tables_agree_with_the_tiling_rule(name: str, mode: str) -> None:
    cfg = paper_preset(name)
    cfg.cluster.mode = mode
    per_host = cfg.cluster.devices_per_node or H20.devices_per_node
    world = cfg.cluster.nnodes * per_host
    if mode == "colocated":  # as pivot/runtime/job/launch.py: training takes every device
        cfg = cfg.replace(train=dataclasses.replace(cfg.train, devices=world))
    # the runtime's construction (pivot/runtime/job/launch.py, then Controller.__init__)
    slots = SlotTable.build(
        ClusterSpec(world, 0, per_host), cfg.rollout.tp, cfg.reward.tp, cfg.train.devices
    )
    runtime = ReplicaTable.build(
        slots, world, {"rollout": 1, "reward": 1}, {"rollout": MODEL, "reward": MODEL}
    )
    sim, _ = build_cluster(cfg, H20)
    want = expected(
        world, per_host, {"rollout": cfg.rollout.tp, "reward": cfg.reward.tp}, cfg.train.devices
    )
    assert rows(runtime) == rows(sim) == want
    assert (
        runtime.train_rid == sim.train_rid == len(want) - 1 and runtime.world == sim.world == world
    )


def test_states_walk_the_cycle_and_track_devices() -> None:
    s = ReplicaStates(table())
    assert set(s.state.values()) == {State.DOWN} and s.up() == [] and s.in_flight == 0
    s.start(0, up=True)
    assert s[0] == State.GOING_UP and s.in_flight == 1 and s.up() == []
    assert s.finish(0) is True
    assert s[0] == State.UP and s.up() == [0] and s.in_flight == 0
    assert s.devices_per_role() == {"rollout": 2, "reward": 0, "train": 0}
    s.start(0, up=False)
    assert s[0] == State.GOING_DOWN and s.up() == []
    s.start(4, up=True)  # reward0 takes devices 0-3 behind rollout0's shift down
    assert s.finish(0) is False and s.holder[0] == 4
    assert s.finish(4) is True and s.devices_per_role() == {"rollout": 0, "reward": 4, "train": 0}


@pytest.mark.parametrize(
    "setup, rid, up, message",
    [
        ([], 0, False, r"rollout0 \(replica 0\): cannot shift down while down \(needs up\)"),
        (
            [(0, True)],
            0,
            True,
            r"rollout0 \(replica 0\): cannot shift up while going_up \(needs down\)",
        ),
        ([(0, True), 0], 0, True, r"cannot shift up while up"),
        ([(0, True), 0, (0, False)], 0, False, r"cannot shift down while going_down"),
        (
            [(0, True), 0],
            4,
            True,
            r"reward0 \(replica 4\): cannot shift up, device 0 is held by rollout0 \(replica 0\) \(up\)",
        ),
        (
            [(5, True)],
            6,
            True,
            r"train0 \(replica 6\): cannot shift up, device 4 is held by reward1 \(replica 5\) \(going_up\)",
        ),
        ([], 9, True, r"replica 9: not in the table"),
    ],
)
def test_illegal_transitions_raise_naming_replica_and_state(
    setup: list, rid: int, up: bool, message: str
) -> None:
    s = ReplicaStates(table())
    for step in setup:
        if isinstance(step, tuple):
            s.start(*step)
        else:
            s.finish(step)
    before = dict(s.state)
    with pytest.raises(ShiftError, match=message):
        s.start(rid, up)
    assert s.state == before


def test_finishing_without_a_shift_in_flight_raises() -> None:
    s = ReplicaStates(table())
    with pytest.raises(ShiftError, match=r"replica 2: no shift in flight to finish \(state down\)"):
        s.finish(2)


def test_bad_table_is_rejected() -> None:
    t = table()
    with pytest.raises(ValueError, match="ids must be 0..1 in order"):
        ReplicaTable(8, (t.replicas[1], t.replicas[0]), (0, 0), 2)
    with pytest.raises(ValueError, match=r"replica 2 devices \(4, 5\) outside 0..3"):
        ReplicaTable(4, t.replicas[:4], (0, 1, 2, 3), 4)
    with pytest.raises(ValueError, match="slot_index: 3 entries for 4 replicas"):
        ReplicaTable(8, t.replicas[:4], (0, 1, 2), 4)
