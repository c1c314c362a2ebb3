"""`WorkerShifts`: a shift carried out on the workers, the release and acquire effects of the
shift executor (pivot/shift/executor.py) as the controller supplies them.

A release is a `ShiftDown` message to the slot (to an inference replica's leader, which forwards
it to its followers, lockstep; to every training rank), an acquire a `ShiftUp` naming the
policy version to read (the worker Reads GPS and joins the slot). A shift completes once every
rank of the slot has sent its `ShiftDone` (`ShiftRecord`, pivot/runtime/control/shift_record.py).
A worker handles its messages in order, so a device's ShiftDown always precedes its ShiftUp.
Every plan carried out is counted and logged here.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from pivot.runtime.control import messages as m
from pivot.runtime.control.shift_record import ShiftRecord

if TYPE_CHECKING:  # annotations only
    from pivot.plan import ShiftPlan
    from pivot.runtime.control.outbox import Outbox
    from pivot.runtime.records.metrics import RunLog
    from pivot.shift import Cluster


class WorkerShifts:
    def __init__(self, cluster: Cluster, outbox: Outbox, log: RunLog) -> None:
        self.cluster, self.outbox, self.log = cluster, outbox, log
        self.pending: dict[int, ShiftRecord] = {}  # rid -> its shift in flight
        self.count = 0  # plans carried out

    def execute(self, plan: ShiftPlan) -> None:
        """Carry out `plan` on the cluster (its effects come back as `release` and `acquire`),
        counted and logged."""
        self.cluster.execute(plan)
        self.count += 1
        table = self.cluster.table
        self.log.shift(
            event="plan",
            up=[table.slot_of(r) for r in plan.up],
            down=[table.slot_of(r) for r in plan.down],
            benefit=plan.benefit,
            planner_s=plan.timings.total_s,
            training=self.cluster.training_in_flight,
        )

    def release(self, rid: int) -> None:
        role, slot = self._begin(rid, up=False)
        # an inference leader forwards slot-wide messages to its followers (lockstep)
        self.outbox.to_slot(rid, m.ShiftDown(role, slot), leader_only=role != "train")

    def acquire(self, rid: int, version: int) -> None:
        """Bring `rid` up, its ranks reading policy `version` (a rollout replica's)."""
        role, slot = self._begin(rid, up=True)
        self.outbox.to_slot(rid, m.ShiftUp(role, slot, version))

    def _begin(self, rid: int, up: bool) -> tuple[str, int]:
        role, slot = self.cluster.table.slot_of(rid)
        devices = set(self.cluster.table.replicas[rid].devices)
        self.pending[rid] = ShiftRecord(role, slot, up, time.monotonic(), devices)
        return role, slot

    def shifting(self, rid: int) -> bool:
        """`rid` has a shift in flight on the workers."""
        return rid in self.pending

    def on_done(self, rid: int, msg: m.ShiftDone) -> tuple[ShiftRecord, bool]:
        """One rank of `rid`'s slot finished its shift: its record, and whether it was the last
        (the shift is then no longer pending)."""
        rec = self.pending[rid]
        complete = rec.add(msg)
        if complete:
            del self.pending[rid]
        return rec, complete
