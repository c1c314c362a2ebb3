"""The shift executor (pivot/shift/executor.py): plan-to-actions order, legality checks before any
effect, completion and joining, against a host that records what it is asked to do (the
cluster of tests/shift/conftest.py)."""

from __future__ import annotations

import pytest

from pivot.plan.planner import PlanTimings, ShiftPlan
from pivot.shift import Phase, ShiftAction, ShiftError, ShiftExecutor, State, plan_actions
from tests.shift.conftest import table


def plan(up: tuple[int, ...] = (), down: tuple[int, ...] = ()) -> ShiftPlan:
    return ShiftPlan(None, up, down, 0.0, 0.0, PlanTimings())


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def migrate_off(self, role: str, rids: list[int]) -> None:
        self.calls.append(("migrate_off", role, rids))

    def release(self, rid: int) -> None:
        self.calls.append(("release", rid))

    def acquire(self, rid: int) -> None:
        self.calls.append(("acquire", rid))

    def migrate_on(self, role: str, rids: list[int]) -> None:
        self.calls.append(("migrate_on", role, rids))


def executor(up: tuple[int, ...] = ()) -> tuple[ShiftExecutor, Recorder]:
    host = Recorder()
    ex = ShiftExecutor(table(), host)
    for rid in up:
        ex.states.start(rid, up=True)
        ex.states.finish(rid)
    return ex, host


def test_actions_release_every_device_before_acquiring_it() -> None:
    # rollout2 and rollout3 (devices 4-7) hand their devices over to reward1 (4-7); both migrate
    # off before either releases (one Algorithm 3 over the leaving set)
    got = plan_actions(plan(up=(5,), down=(2, 3)), table())
    assert got == [
        ShiftAction(Phase.MIGRATE_OFF, 2, "rollout", 2),
        ShiftAction(Phase.MIGRATE_OFF, 3, "rollout", 3),
        ShiftAction(Phase.RELEASE, 2, "rollout", 2),
        ShiftAction(Phase.RELEASE, 3, "rollout", 3),
        ShiftAction(Phase.ACQUIRE, 5, "reward", 1),
    ]


def test_training_shifts_as_a_whole_and_has_no_sequences_to_migrate() -> None:
    t = table()
    assert t.replicas[t.train_rid].devices == (4, 5, 6, 7)  # the whole pool, one slot
    got = plan_actions(plan(up=(2, 3), down=(t.train_rid,)), t)
    assert [(a.phase, a.rid) for a in got] == [
        (Phase.RELEASE, 6),
        (Phase.ACQUIRE, 2),
        (Phase.ACQUIRE, 3),
    ]


@pytest.mark.parametrize(
    "up, down, message",
    [
        ((0,), (0,), r"plan names rollout0 \(replica 0\) twice"),
        ((1, 1), (), r"plan names rollout1 \(replica 1\) twice"),
        ((7,), (), r"plan names replica 7: not in the table \(ids 0..6\)"),
    ],
)
def test_malformed_plans_are_rejected(up: tuple, down: tuple, message: str) -> None:
    with pytest.raises(ShiftError, match=message):
        plan_actions(plan(up, down), table())


def test_execute_runs_the_actions_then_complete_joins_per_role_at_once() -> None:
    ex, host = executor(up=(0, 1, 5))
    ex.execute(plan(up=(2, 3), down=(5,)))
    assert host.calls == [
        ("migrate_off", "reward", [5]),
        ("release", 5),
        ("acquire", 2),
        ("acquire", 3),
    ]
    assert (ex.states[5], ex.states[2], ex.states[3]) == (
        State.GOING_DOWN,
        State.GOING_UP,
        State.GOING_UP,
    )
    assert ex.states.in_flight == 3
    host.calls.clear()
    ex.complete([5])
    assert host.calls == [] and ex.states[5] == State.DOWN  # a shift down migrates nothing more
    ex.complete([2, 3])
    assert host.calls == [("migrate_on", "rollout", [2, 3])]  # both join in one migration
    assert ex.states.up() == [0, 1, 2, 3] and ex.states.in_flight == 0


def test_a_trainer_coming_up_joins_no_scheduler() -> None:
    ex, host = executor()
    ex.execute(plan(up=(6,)))
    ex.complete([6])
    assert host.calls == [("acquire", 6)] and ex.states.up() == [6]


@pytest.mark.parametrize(
    "up, down, message",
    [
        (
            (5,),
            (),
            r"reward1 \(replica 5\): cannot shift up, device 4 is held by rollout2 \(replica 2\) \(up\)",
        ),
        ((2,), (5,), r"reward1 \(replica 5\): cannot shift down while down"),
        ((0,), (), r"rollout0 \(replica 0\): cannot shift up while up"),
        (
            (1, 4),
            (0,),
            r"plan shifts up rollout1 \(replica 1\) and reward0 \(replica 4\), both on device 2",
        ),
    ],
)
def test_an_illegal_plan_changes_nothing(up: tuple, down: tuple, message: str) -> None:
    ex, host = executor(up=(0, 2, 3))
    before = dict(ex.states.state)
    with pytest.raises(ShiftError, match=message):
        ex.execute(plan(up, down))
    assert host.calls == [] and ex.states.state == before


def test_completing_twice_raises() -> None:
    ex, _ = executor()
    ex.execute(plan(up=(0,)))
    ex.complete([0])
    with pytest.raises(ShiftError, match=r"replica 0: no shift in flight to finish \(state up\)"):
        ex.complete([0])


def test_bring_up_starts_up_and_hands_each_role_its_replicas() -> None:
    ex, host = executor()
    ex.bring_up([0, 1, 6])
    assert ex.states.up() == [0, 1, 6] and ex.states.in_flight == 0
    assert host.calls == [("migrate_on", "rollout", [0, 1]), ("migrate_on", "reward", [])]


def test_executor_times_each_plan_that_shifts_down_per_role_brought_up() -> None:
    now = [0.0]
    ex = ShiftExecutor(table(), Recorder(), clock=lambda: now[0])
    ex.bring_up([0, 1])
    ex.execute(plan(up=(5,)))  # onto free devices 4-7: nothing given up, not timed
    now[0] = 3.0
    ex.complete([5])
    assert ex.timer.means() == {}
    now[0] = 10.0
    ex.execute(plan(up=(2, 3), down=(5,)))
    now[0] = 11.0
    ex.complete([5])
    assert ex.timer.means() == {}  # timed when its last shift completes
    now[0] = 14.0
    ex.complete([2, 3])
    assert ex.timer.means() == {"rollout": 4.0}
    now[0] = 20.0
    ex.execute(plan(up=(5,), down=(2, 3)))
    now[0] = 28.0
    ex.complete([2, 3, 5])
    now[0] = 30.0
    ex.execute(plan(up=(2, 3), down=(5,)))
    now[0] = 36.0
    ex.complete([5, 2, 3])
    assert ex.timer.means() == {"rollout": 5.0, "reward": 8.0}  # (4 + 6) / 2 and 8


def test_the_leaving_set_of_a_role_migrates_off_in_one_call() -> None:
    ex, host = executor(up=(0, 1, 2, 3))
    ex.execute(plan(up=(5,), down=(2, 3)))
    assert host.calls == [
        ("migrate_off", "rollout", [2, 3]),
        ("release", 2),
        ("release", 3),
        ("acquire", 5),
    ]
