"""`EngineFailures`: inference engines that failed inside live ranks, handled without a restart
(docs/reliability.md). A failure is a forced shift down of the replica (its sequences come back
with their tokens through the abort path and continue elsewhere), then a shift up of the same
replica, whose engine the worker builds anew from GPS; a replica whose engine fails too often
stays down (`retired` in the cluster), and the run fails if that leaves a role with no replica.
What comes back, what stays out and how long each recovery took is `EngineRecovery`'s account
(pivot/runtime/control/recovery.py); this part sends the shifts and writes the log.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING

from pivot.plan import PlanTimings, ShiftPlan
from pivot.runtime.control.recovery import EngineRecovery
from pivot.sched.records import Role

if TYPE_CHECKING:  # annotations only
    from pivot.config import RecoveryConfig
    from pivot.plan.modes import Mode
    from pivot.runtime.control import messages as m
    from pivot.runtime.control.worker_shifts import WorkerShifts
    from pivot.runtime.records.metrics import RunLog
    from pivot.shift import Cluster


class EngineFailures:
    def __init__(
        self,
        cfg: RecoveryConfig,
        *,
        cluster: Cluster,
        shifting: WorkerShifts,
        mode: Mode,
        log: RunLog,
    ) -> None:
        self.cluster, self.shifting, self.mode, self.log = cluster, shifting, mode, log
        self.recovery = EngineRecovery(cfg.max_engine_failures, cfg.window_s)

    def on_failed(self, msg: m.EngineFailed) -> None:
        """A replica's engine failed: shift it down, then up with a new engine (`shifted`).
        One shifting already is left to its shift: a shift down hands back what it held, and
        the worker builds the engine anew on the slot's next shift up."""
        rid = self.cluster.table.rid(msg.role, msg.slot)
        up = self.cluster.is_up(rid) and not self.shifting.shifting(rid)
        self.recovery.failed(rid, time.monotonic(), up)
        self.log.shift(
            event="engine_failed",
            role=msg.role,
            slot=msg.slot,
            rank=msg.rank,
            salvaged=msg.salvaged,
            error=msg.error,
        )
        print(
            f"pivot: {msg.role}{msg.slot} (rank {msg.rank}) engine failed: {msg.error}; its "
            f"{msg.salvaged} sequences continue on other replicas",
            file=sys.stderr,
            flush=True,
        )
        if up:
            self.shifting.execute(ShiftPlan(None, (), (rid,), 0.0, 0.0, PlanTimings()))

    def shifted(self, rid: int, msg: m.ShiftDone) -> str | None:
        """A shift of `rid` completed: if its engine's failure put it down, bring it back up
        with a new engine, or keep it out (too many failures); if that was its way back up,
        record the recovery's time. Returns why the run cannot go on, if it cannot."""
        role, slot = self.cluster.table.slot_of(rid)
        if msg.up:
            took = self.recovery.shifted_up(rid, time.monotonic())
            if took is not None:
                self.log.shift(event="engine_rebuilt", role=role, slot=slot, recover_s=took)
            return None
        back = self.recovery.shifted_down(rid)
        if back:
            self.shifting.execute(ShiftPlan(Role(role), (rid,), (), 0.0, 0.0, PlanTimings()))
        elif back is not None:
            self.cluster.retired.add(rid)
            self.log.shift(event="replica_retired", role=role, slot=slot)
            n = self.recovery.max_failures
            print(
                f"pivot: {role}{slot} stays down for the rest of the run: its engine failed {n} "
                f"times within {self.recovery.window_s:.0f} s (--recovery.max-engine-failures)",
                file=sys.stderr,
                flush=True,
            )
            # a mode that moves devices can bring up another of the role's slots; the static
            # split cannot, and a role with no replica can never finish its work
            static = self.mode.name == "disaggregated"
            if not self.cluster.slots(role) or (
                static and not any(self.cluster.role_of(r) == role for r in self.cluster.up_slots())
            ):
                return f"no {role} replica is left: each failed too often and stays down"
        return None
