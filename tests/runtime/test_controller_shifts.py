"""The runtime controller supplying the shift executor's effects: a plan becomes ShiftDown/ShiftUp
messages in the executor's order (on every rank, the shift down it leaves precedes the shift up it
takes), and a shift completes only when every rank of the slot has sent its ShiftDone; the
training slot's sizing as the controller's `SlotResizer` carries it out. No workers: a recording
endpoint stands in for the control plane."""

from __future__ import annotations

import pytest

from configs.presets import get_preset
from pivot.dist import ClusterSpec, SlotTable
from pivot.plan.modes import make_mode
from pivot.plan.planner import PlanTimings, ShiftPlan
from pivot.runtime.control import messages as m
from pivot.runtime.control.controller import Controller
from pivot.sched import ThroughputModel
from pivot.shift import ShiftError, State
from pivot.sim.autosize import Sizing
from pivot.sim.deploy import Allocation, SearchPoint

# 4 ranks on one host: rollout TP1 slots are replicas 0-3 (ranks 0..3), reward TP1 replicas 4-7,
# training replica 8 on ranks 2-3


class Endpoint:
    def __init__(self) -> None:
        self.sent: list[tuple[int, object]] = []

    def send(self, rank: int, msg: object) -> None:
        self.sent.append((rank, msg))

    def take(self) -> list[tuple[int, str, str, int]]:
        out = [(rank, type(msg).__name__, msg.role, msg.slot) for rank, msg in self.sent]
        self.sent.clear()
        return out


class Log:
    def __init__(self) -> None:
        self.events: list[dict] = []

    def shift(self, **event: object) -> None:
        self.events.append(event)


def plan(up: tuple[int, ...] = (), down: tuple[int, ...] = ()) -> ShiftPlan:
    return ShiftPlan(None, up, down, 0.0, 0.0, PlanTimings())


def controller(table: SlotTable, sizer: object = None) -> Controller:
    """A controller on 4 ranks of one host in pivot mode, with no flow, progress or checkpoints
    (the tests here never reach them), its messages recorded."""
    cfg = get_preset("tiny-cpu")
    return Controller(
        cfg,
        table=table,
        world_size=4,
        endpoint=Endpoint(),  # records what is sent
        flow=None,
        mode=make_mode(cfg),
        log=Log(),
        profiles=dict.fromkeys(("rollout", "reward"), ThroughputModel(1e-8, 1e-3, 1e-4, 1e-2)),
        start_step=0,
        progress=None,
        checkpointer=None,
        sizer=sizer,  # a stand-in: what the resizer uses of SlotSizer
    )


@pytest.fixture
def ctrl() -> Controller:
    return controller(SlotTable.build(ClusterSpec(4, 0, 4), 1, 1, 2))


def sized(sizer: Sizer) -> Controller:
    return controller(SlotTable.build(ClusterSpec(4, 0, 4), 1, 1, 2), sizer)


def done(ctrl: Controller, rank: int, role: str, slot: int, up: bool) -> None:
    ctrl.handle(
        rank, m.ShiftDone(rank, role, slot, up, 0, {"gps_read": 0.1 * rank}, read_bytes=100 + rank)
    )


def test_a_plan_becomes_messages_and_completes_on_the_last_rank(ctrl: Controller) -> None:
    ctrl.execute(plan(up=(0, 5, 8)))
    assert ctrl.ep.take() == [
        (0, "ShiftUp", "rollout", 0),
        (1, "ShiftUp", "reward", 1),
        (2, "ShiftUp", "train", 0),
        (3, "ShiftUp", "train", 0),
    ]
    done(ctrl, 0, "rollout", 0, True)
    done(ctrl, 1, "reward", 1, True)
    done(ctrl, 2, "train", 0, True)
    assert ctrl.cluster.shifts.states[8] == State.GOING_UP  # rank 3 has not reported yet
    done(ctrl, 3, "train", 0, True)
    assert ctrl.cluster.up_slots() == [0, 5, 8] and ctrl.shifting.pending == {}
    sched = ctrl.cluster.sched
    assert sched["rollout"].active_ids == [0] and sched["reward"].active_ids == [5]
    train = ctrl.log.events[-1]
    assert (
        train["event"] == "shift_up"
        and train["devices"] == [2, 3]
        and train["gps_read_bytes"] == [102, 103]
    )
    assert train["phases"]["gps_read"] == pytest.approx(0.3)  # the slowest rank's


def test_each_rank_leaves_its_role_before_it_takes_the_next(ctrl: Controller) -> None:
    ctrl.execute(plan(up=(0, 5, 8)))
    for rank, role, slot in ((0, "rollout", 0), (1, "reward", 1), (2, "train", 0), (3, "train", 0)):
        done(ctrl, rank, role, slot, True)
    ctrl.ep.take()
    ctrl.execute(plan(up=(2, 7), down=(8,)))  # training hands ranks 2 and 3 to rollout2 and reward3
    assert ctrl.ep.take() == [
        (2, "ShiftDown", "train", 0),
        (3, "ShiftDown", "train", 0),
        (2, "ShiftUp", "rollout", 2),
        (3, "ShiftUp", "reward", 3),
    ]
    done(ctrl, 2, "train", 0, False)  # each rank reports in the order it handled the messages
    done(ctrl, 2, "rollout", 2, True)
    states = ctrl.cluster.shifts.states
    assert states[2] == State.UP and ctrl.cluster.sched["rollout"].active_ids == [0, 2]
    assert states[8] == State.GOING_DOWN  # rank 3 still leaving training
    done(ctrl, 3, "train", 0, False)
    assert states[8] == State.DOWN and ctrl.log.events[-1]["event"] == "shift_down"
    done(ctrl, 3, "reward", 3, True)
    assert ctrl.cluster.up_slots() == [0, 2, 5, 7] and states.devices_per_role() == {
        "rollout": 2,
        "reward": 2,
        "train": 0,
    }


def test_an_illegal_plan_sends_nothing(ctrl: Controller) -> None:
    ctrl.execute(plan(up=(0,)))
    ctrl.ep.take()
    with pytest.raises(
        ShiftError, match=r"reward0 \(replica 4\): cannot shift up, device 0 is held by rollout0"
    ):
        ctrl.execute(plan(up=(4,)))
    assert ctrl.ep.take() == []


def test_a_late_weights_ack_updates_no_replica_that_is_shifting_down(ctrl: Controller) -> None:
    """An update answered after the controller sent the replica's ShiftDown, with a newer policy
    meanwhile: telling it to update again would reach a rank that no longer serves rollout (it
    failed the job with 'rollout role is not up on this rank'); its next shift up reads the newest."""
    ctrl.execute(plan(up=(0,)))
    done(ctrl, 0, "rollout", 0, True)
    ctrl.ep.sent.clear()
    ctrl.training.version = 1
    ctrl.update(0)  # a training step finished: rollout0 is told to read version 1
    ctrl.training.version = 2  # ... and another one, before rollout0 answers
    ctrl.execute(plan(down=(0,)))
    assert [(r, type(x).__name__) for r, x in ctrl.ep.sent] == [
        (0, "UpdateWeights"),
        (0, "ShiftDown"),
    ]
    ctrl.ep.sent.clear()
    ctrl.handle(0, m.WeightsUpdated(0, 0, 1, 0.01))
    assert ctrl.ep.sent == []


class Sizer:  # a finished sizing, as SlotSizer.poll (or .wait, at the run's end) hands it over
    def __init__(self, pick: Allocation, owed: bool = False) -> None:
        self.pick, self.owed, self.running = pick, owed, True
        self.started: list[Allocation] = []

    def poll(self) -> tuple[Sizing, Allocation]:
        points = (SearchPoint(Allocation(2), 100.0), SearchPoint(self.pick, 120.0))
        return Sizing(Allocation(2), points, 0.1, True), self.pick

    wait = poll

    def start(self, current: Allocation) -> None:
        self.started.append(current)

    def close(self) -> None:
        self.running = False


def test_a_picked_reserve_holds_at_once_and_a_new_slot_waits() -> None:
    ctrl = sized(Sizer(Allocation(2, 1)))  # poll is all it uses
    ctrl.resizer.poll()  # the same slot, 1 device reserved for rollout: the planner's from now
    planner = ctrl.mode.planner  # type: ignore[attr-defined]  (pivot mode: Shiftable)
    assert (planner.cfg.reserve_rollout, planner.cfg.reserve_reward) == (1, 4 - 2 - 1)
    assert ctrl.resizer.resize_to is None and ctrl.resizer.allocation == Allocation(2, 1)
    row = ctrl.log.events[-1]  # type: ignore[attr-defined]
    assert row["event"] == "train_sizing" and row["pick"] == "T2/R1" and row["reserve"] == 0
    assert row["predicted"] == {"T2": 100, "T2/R1": 120}
    ctrl.resizer.sizer = Sizer(Allocation(1))  # type: ignore[assignment]
    ctrl.resizer.poll()  # another slot, no reserve: the reserve goes now, the slot at a boundary
    assert (planner.cfg.reserve_rollout, planner.cfg.reserve_reward) == (0, 0)
    assert ctrl.resizer.resize_to == 1 and ctrl.cluster.train_devices == 2


def test_a_sizing_owed_starts_as_one_lands_until_the_last_step() -> None:
    sizer = Sizer(Allocation(2, 1), owed=True)
    ctrl = sized(sizer)
    ctrl.resizer.poll()  # one came due while it ran: it starts now, with the reserve just picked
    assert sizer.started == [Allocation(2, 1)]
    ctrl.training.step = ctrl.cfg.train.steps
    ctrl.resizer.poll()  # the last step has trained: nothing left to size
    assert sizer.started == [Allocation(2, 1)]


def test_the_run_end_awaits_the_sizing_in_flight_for_the_next_launch() -> None:
    ctrl = sized(Sizer(Allocation(1, 2)))
    ctrl.finish()  # the ranks are told to stop first; rank 0 then awaits the search alone
    assert type(ctrl.ep.sent[-1][1]).__name__ == "Stop"
    row = ctrl.log.events[-1]  # type: ignore[attr-defined]
    assert row["event"] == "train_sizing" and row["pick"] == "T1/R2"
    assert row["next_launch"] == (
        "--train.devices 1 --planner.reserve-rollout 2 --planner.reserve-reward 1"
    )
    ctrl.resizer.sizer = Sizer(Allocation(1))  # type: ignore[assignment]
    ctrl.failed = "rank 3 gone"  # a failed run does not wait: torchrun restarts it
    ctrl.finish()
    assert ctrl.log.events[-1]["event"] == "stop"  # type: ignore[attr-defined]


def test_a_new_slots_reserve_holds_once_the_slot_moves() -> None:
    """A pick for another slot with a split: the split is of the devices the new slot leaves, so
    it holds only once the slot moves (on 8 ranks a 7-device slot with a T4/R1 pick held rollout
    1 and reward 3 of its 1 inference device, and the owed sizing from T7/R1 failed the run)."""
    sizer = Sizer(Allocation(1, 2), owed=True)
    ctrl = sized(sizer)
    planner = ctrl.mode.planner  # type: ignore[attr-defined]  (pivot mode: Shiftable)
    ctrl.resizer.poll()
    assert (planner.cfg.reserve_rollout, planner.cfg.reserve_reward) == (0, 0)
    assert sizer.started == [Allocation(2)]  # the slot as it is: no split yet
    assert ctrl.resizer.resize_to == 1
    ctrl.resizer.maybe_resize()  # nothing trained yet: the slot moves now
    assert ctrl.cluster.train_devices == 1
    assert (planner.cfg.reserve_rollout, planner.cfg.reserve_reward) == (2, 1)
    assert ctrl.resizer.allocation == Allocation(1, 2)
