"""The controller: rank 0's background thread, the RL loop over the workers, which it reaches only
through the asynchronous control plane. `run` reads as the loop: every rank says hello; the
deployment mode's first plan brings replicas up; then, turn by turn, the workers' messages are
collected (`handle`) and the loop ticks (`tick`): prompts in and dispatched, a training step
started once its batch is complete, evaluations written, the training slot re-sized, and the
mode's (the planner's) next shift. A finished step (`on_trained`) updates the rollout replicas,
writes its metrics row, and asks for its checkpoint.

It holds the `Cluster` (pivot/shift/cluster.py, shared with the simulator: replica table and
states, shift executor, schedulers) and supplies what the cluster calls back: a shift's effects
on the workers and how training stands. Everything else is a part that owns its state:
`SequenceRouter` (where each sequence runs), `WorkerShifts` (ShiftDown/ShiftUp until every rank
is done), `TrainingDriver` (steps, policy version, checkpoints), `SlotResizer` (the training
slot sized by measurement, moved at a step boundary), `EngineFailures` (engines that failed,
rebuilt or retired), `ControllerReports` (metrics rows, the monitor's timeline), `Outbox`
(messages by replica) and `ReplicaVersions` (the policy version each rollout replica serves).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from pivot.config import PivotConfig
from pivot.dist import SlotTable
from pivot.rl.evaluation import eval_due
from pivot.runtime.control import messages as m
from pivot.runtime.control.engine_failures import EngineFailures
from pivot.runtime.control.outbox import Outbox
from pivot.runtime.control.reports import ControllerReports
from pivot.runtime.control.sequence_router import SequenceRouter
from pivot.runtime.control.slot_resizer import SlotResizer
from pivot.runtime.control.training_driver import TrainedStep, TrainingDriver
from pivot.runtime.control.worker_shifts import WorkerShifts
from pivot.runtime.weights.replica_versions import ReplicaVersions
from pivot.shift import Cluster, ReplicaTable

if TYPE_CHECKING:  # annotations only
    from pivot.engine import Request
    from pivot.plan import ShiftPlan
    from pivot.plan.modes import Mode
    from pivot.runtime.control.control_plane import ControllerEndpoint
    from pivot.runtime.control.sizing import SlotSizer
    from pivot.runtime.flow.rl_flow import RLFlow
    from pivot.runtime.records.checkpoint import Checkpointer
    from pivot.runtime.records.metrics import RunLog
    from pivot.runtime.records.progress import StepProgress
    from pivot.sched.throughput import ThroughputModel

MONITOR_EVERY_S = 0.2


class Controller:
    def __init__(
        self,
        cfg: PivotConfig,
        *,
        table: SlotTable,
        world_size: int,
        endpoint: ControllerEndpoint,
        flow: RLFlow,
        mode: Mode,
        log: RunLog,
        profiles: dict[str, ThroughputModel],
        start_step: int,
        progress: StepProgress,
        checkpointer: Checkpointer,
        sizer: SlotSizer | None = None,
    ) -> None:
        """`profiles`: each inference role's throughput model; `start_step`: the steps an earlier
        attempt trained; `sizer`: the training slot sized by measurement (`--train.resize-every`),
        None = fixed."""
        self.cfg, self.ep, self.flow, self.mode = cfg, endpoint, flow, mode
        self.log, self.progress = log, progress
        kv = {
            "rollout": cfg.rollout.engine.kv_capacity_tokens,
            "reward": cfg.reward.engine.kv_capacity_tokens,
        }
        replicas = ReplicaTable.build(table, world_size, kv, profiles)
        # what the cluster calls back is this controller's: shift effects, training's state
        self.cluster = Cluster(replicas, effects=self, training=self, migrate=cfg.planner.migration)
        self.outbox = Outbox(endpoint, self.cluster)
        self.router = SequenceRouter(self.cluster, self.outbox, flow, cfg.reward.timeout_s)
        self.shifting = WorkerShifts(self.cluster, self.outbox, log)
        self.training = TrainingDriver(
            cluster=self.cluster,
            outbox=self.outbox,
            flow=flow,
            log=log,
            checkpointer=checkpointer,
            total_steps=cfg.train.steps,
            start_step=start_step,
        )
        self.resizer = SlotResizer(
            sizer=sizer,
            cluster=self.cluster,
            mode=mode,
            training=self.training,
            shifting=self.shifting,
            outbox=self.outbox,
            log=log,
            train=cfg.train,
        )
        self.versions = ReplicaVersions()  # rid -> the policy version its ranks read
        self.engine_failures = EngineFailures(
            cfg.recovery, cluster=self.cluster, shifting=self.shifting, mode=mode, log=log
        )
        self.reports = ControllerReports(log, progress)
        self.failed: str | None = None
        self._last_monitor = self._last_plan = 0.0

    # ---- the loop --------------------------------------------------------------------------
    def run(self) -> None:
        self.await_hello()
        self.execute(self.mode.initial(self.cluster))
        self.resizer.start()  # on the engines' profiles; training as the model says
        self.router.submit(self.flow.start_eval(self.training.step))
        while (not self.training.finished or self.flow.evals) and self.failed is None:
            got = self.ep.recv(5)
            while got is not None:
                self.handle(*got)
                got = self.ep.recv(0)
            self.tick()
        self.finish()

    def await_hello(self) -> None:
        hello: set[int] = set()
        while len(hello) < self.cluster.world:
            got = self.ep.recv(1000)
            if got and isinstance(got[1], m.Hello):
                hello.add(got[0])

    def tick(self) -> None:
        self.router.submit(self.flow.fill(self.training.version, self.cfg.train.steps))
        self.router.submit(self.flow.poll_episodes())  # tools answered: next turns, judgings
        self.router.dispatch()
        self.router.time_out_judges()
        if not self.resizer.due():  # else the slot moves at this step boundary first
            self.training.maybe_start()
        for result in self.flow.eval_results:
            self.log.eval(result)
            self.progress.eval(result)
        self.flow.eval_results.clear()
        now = time.monotonic()
        if now - self._last_monitor >= MONITOR_EVERY_S:
            self._last_monitor = now
            self.monitor()
        self.resizer.poll()
        self.resizer.maybe_resize()
        if not self.cluster.in_flight and now - self._last_plan >= self.mode.interval_s:
            self._last_plan = now
            plan = self.mode.plan(self.cluster)
            if plan is not None:
                self.execute(plan)

    def finish(self) -> None:
        # let the last checkpoint land, and every shift in flight finish: a Stop reaches a
        # replica of several ranks through its leader's forward, which waits for every follower,
        # so each rank must be settled in its slot (or out of it) when the Stop arrives
        while (self.training.saving or self.cluster.in_flight) and self.failed is None:
            got = self.ep.recv(100)
            if got is not None:
                self.handle(*got)
        self.outbox.stop_all(m.Stop(self.failed or "done"))
        self.log.shift(event="stop", reason=self.failed or "done")
        self.resizer.finish(self.failed)

    def execute(self, plan: ShiftPlan) -> None:
        self.shifting.execute(plan)

    # ---- messages from workers -------------------------------------------------------------
    def handle(self, rank: int, msg: m.Message) -> None:
        table = self.cluster.table
        if isinstance(msg, m.Finished):
            self.router.on_finished(msg)
        elif isinstance(msg, m.Stats):
            rid = table.rid(msg.role, msg.slot)
            self.reports.seen(rid, msg)
            self.versions.report(rid, msg.stats.weights_version)
            self.router.on_progress(msg, rid)
        elif isinstance(msg, m.Aborted):
            self.on_partials(msg.partials, table.rid(msg.role, msg.slot))
        elif isinstance(msg, m.ShiftDone):
            self.on_shift_done(msg)
        elif isinstance(msg, m.Trained):
            self.on_trained(msg)
        elif isinstance(msg, m.WeightsUpdated):
            rid = table.rid("rollout", msg.slot)
            ranks, what = table.replicas[rid].devices, f"rollout{msg.slot}"
            latest = self.training.version
            again = self.versions.updated(rid, msg.rank, msg.version, ranks, latest, what)
            if again and self.cluster.is_up(rid):  # one shifting down reads the newest later
                self.update(rid)
        elif isinstance(msg, m.Saved):
            path = self.training.on_saved(msg)
            if path is not None:
                self.resizer.saved(msg.step, path)
        elif isinstance(msg, m.EngineFailed):
            self.engine_failures.on_failed(msg)
        elif isinstance(msg, m.Failed):
            first, _, trace = msg.error.partition("\n")  # a bug's traceback follows its line
            self.failed = f"rank {msg.rank} failed: {first}"
            print(f"pivot: {self.failed}" + (f"\n{trace}" if trace else ""), flush=True)

    def on_partials(self, partials: list[Request], rid: int) -> None:
        self.router.on_partials(partials, self.versions.get(rid, self.training.version))

    def on_trained(self, msg: m.Trained) -> None:
        done = self.training.on_trained(msg)
        if done is None:
            return  # not every training rank's answer is in
        for rid in self.cluster.up_slots():
            if self.cluster.role_of(rid) == "rollout":
                self.update(rid)
        self.report_step(done)
        if eval_due(done.step, self.cfg.train.steps, self.cfg.eval.every):
            self.router.submit(self.flow.start_eval(done.step))
        self.resizer.trained(done)
        self.training.checkpoint(force=self.resizer.at_boundary(done.step))

    def on_shift_done(self, msg: m.ShiftDone) -> None:
        rid = self.cluster.table.rid(msg.role, msg.slot)
        rec, complete = self.shifting.on_done(rid, msg)
        if msg.partials:
            self.on_partials(msg.partials, rid)
        if not complete:
            return
        devices = self.cluster.table.replicas[rid].devices
        self.resizer.shifted(msg, len(devices), rec.phases["total"])
        if msg.up and msg.role == "rollout":
            if self.versions.shifted_up(
                rid, rec.versions, self.training.version, f"rollout{msg.slot}"
            ):
                self.update(rid)  # mixed, or a training step finished while it shifted up
        self.cluster.shifts.complete([rid])
        self.log.shift(**rec.event(msg, devices))
        if (why := self.engine_failures.shifted(rid, msg)) is not None:
            self.failed = why

    def update(self, rid: int) -> None:
        """Tell a rollout replica to read the newest policy, every rank the same version."""
        slot = self.cluster.table.slot_of(rid)[1]
        self.outbox.to_slot(rid, m.UpdateWeights(slot, self.training.version), leader_only=True)

    # ---- what the cluster calls back (pivot/shift/cluster.py) ----------------------------------
    def migrate_off(self, role: str, rids: list[int]) -> None:
        self.router.apply(self.cluster.sched[role].shift_down(rids))

    def release(self, rid: int) -> None:
        self.shifting.release(rid)

    def acquire(self, rid: int) -> None:
        self.shifting.acquire(rid, self.training.version)

    def migrate_on(self, role: str, rids: list[int]) -> None:
        self.router.apply(self.cluster.sched[role].shift_up(rids))

    @property
    def training_in_flight(self) -> bool:
        return self.training.in_flight

    def train_ready(self) -> bool:
        return self.training.ready()

    def train_throughput(self) -> float:
        return self.training.tokens_per_s

    # ---- reports (pivot/runtime/control/reports.py) --------------------------------------------
    def report_step(self, done: TrainedStep) -> None:
        devices = self.cluster.shifts.states.devices_per_role()
        counters = {
            "policy_version": self.training.version,
            "shifts": self.shifting.count,
            **{f"devices/{k}": v for k, v in devices.items()},
            **self.training.batch_summary,
            **self.flow.metrics(),
            **self.reports.engine_counters(),
            "count/rejected_frames": self.ep.rejected,
            "count/mixed_versions": self.versions.mixed,
            "count/caught_up": self.versions.caught_up,
            **self.engine_failures.recovery.counters(),
            "count/train_oom_splits": self.training.splits,
            "count/train_resizes": self.resizer.resizes,
        }
        self.reports.step(done.step, done.metrics, done.secs, devices, counters)

    def monitor(self) -> None:
        self.reports.sample(
            self.cluster.role_of,
            self.cluster.is_up,
            self.cluster.shifts.states.devices_per_role(),
            step=self.training.step,
            aborted=self.flow.stats.aborted,
            migrated=self.flow.stats.migrated,
        )
