"""Every rank of a rollout replica holds the same policy version: a replica whose ranks read
different versions (GPS overwrote the one named while a rank waited) or that came up behind the
newest policy (training finished while it shifted up) is told to update, every rank to the newest
version; counted and logged. The controller with a recording endpoint, no workers."""

from __future__ import annotations

import pytest
from test_controller_shifts import controller, plan

from pivot.dist import ClusterSpec, SlotTable
from pivot.runtime.control import messages as m
from pivot.runtime.control.controller import Controller


@pytest.fixture
def ctrl() -> Controller:
    """4 ranks: rollout TP2 replicas 0 (ranks 0-1) and 1 (ranks 2-3); reward TP1 replicas 2-5."""
    return controller(SlotTable.build(ClusterSpec(4, 0, 4), 2, 1, 2))


def up(ctrl: Controller, versions: dict[int, int]) -> None:
    for rank, version in versions.items():
        ctrl.handle(rank, m.ShiftDone(rank, "rollout", 0, True, version, {}))


def updates(ctrl: Controller) -> list[tuple[int, int]]:
    sent = [(rank, msg.version) for rank, msg in ctrl.ep.sent if isinstance(msg, m.UpdateWeights)]
    ctrl.ep.sent.clear()
    return sent


def test_a_replica_up_with_mixed_versions_is_updated_whole(ctrl: Controller) -> None:
    ctrl.training.version = 4
    ctrl.execute(plan(up=(0,)))
    assert [msg.version for _, msg in ctrl.ep.sent] == [4, 4]  # every rank is told which
    ctrl.ep.sent.clear()
    up(ctrl, {0: 4, 1: 5})  # rank 1 found 4 overwritten and read the newest
    assert updates(ctrl) == [(0, 4)] and ctrl.versions.mixed == 1
    assert ctrl.log.events[-1]["version"] == 4  # the oldest a rank holds, not the last report
    # the update's answers disagree again: updated again; once they agree, nothing more
    for rank, version in ((0, 5), (1, 6)):
        ctrl.handle(rank, m.WeightsUpdated(rank, 0, version, 0.1))
    assert updates(ctrl) == [(0, 4)] and ctrl.versions.mixed == 2
    ctrl.training.version = 6
    for rank in (0, 1):
        ctrl.handle(rank, m.WeightsUpdated(rank, 0, 6, 0.1))
    assert updates(ctrl) == [] and ctrl.versions.get(0, -1) == 6


def test_a_replica_up_behind_the_newest_policy_catches_up(ctrl: Controller) -> None:
    ctrl.training.version = 2
    ctrl.execute(plan(up=(0,)))
    ctrl.ep.sent.clear()
    ctrl.training.version = 3  # a training step finished while the replica shifted up
    up(ctrl, {0: 2, 1: 2})
    assert updates(ctrl) == [(0, 3)] and ctrl.versions.caught_up == 1 and ctrl.versions.mixed == 0
