"""The controller: rank 0's background thread. It holds the monitor (worker stats, at least
every 200 ms), the rollout and reward `ShiftAwareScheduler`s, the planner (through the
deployment mode), the shift executor, the RL sample flow with its buffer, and the training
trigger. It talks to workers only through the asynchronous control plane.

The replica table, the replica states and the order of a shift's phases are pivot/shift/'s
(the controller is its `ClusterHost`, as the simulator is); the controller supplies the real
effects: a release is a `ShiftDown` message, an acquire a `ShiftUp` (the worker Reads GPS and
joins the slot), and a shift completes once every rank of the slot has sent its `ShiftDone`.
A worker handles its messages in order, so a device's ShiftDown always precedes its ShiftUp.
A sequence aborted on one replica is dispatched elsewhere only once its partial (the tokens
generated so far) has come back, so nothing runs twice.

What it writes about the run (a metrics row per training step, the monitor's timeline sample) is
its `ControllerReports` part's (pivot/runtime/control/reports.py), given the counters it gathers.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import TYPE_CHECKING

from pivot.config import PivotConfig
from pivot.dist import SlotTable
from pivot.plan import PlanTimings, ShiftPlan
from pivot.plan.modes import reserve, rollout_reserve
from pivot.rl.evaluation import eval_due
from pivot.runtime.control import messages as m
from pivot.runtime.control.control_plane import ControllerEndpoint
from pivot.runtime.control.recovery import EngineRecovery
from pivot.runtime.control.reports import ControllerReports, kv_metrics
from pivot.runtime.control.shift_record import ShiftRecord
from pivot.runtime.control.sizing import launch_flags
from pivot.runtime.flow.rl_flow import RLFlow
from pivot.runtime.records.metrics import RunLog
from pivot.runtime.weights.replica_versions import ReplicaVersions
from pivot.sched.records import Abort, Dispatch, Role
from pivot.sched.throughput import ThroughputModel
from pivot.shift import ClusterHost, ReplicaTable
from pivot.sim.autosize import Sizing, label
from pivot.sim.deploy import Allocation

if TYPE_CHECKING:  # annotations only
    from pivot.plan.modes import Mode
    from pivot.runtime.control.sizing import SlotSizer
    from pivot.runtime.records.checkpoint import Checkpointer
    from pivot.runtime.records.progress import StepProgress

MONITOR_EVERY_S = 0.2


class Controller(ClusterHost):
    def __init__(
        self,
        cfg: PivotConfig,
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
        """`sizer`: the training slot sized by measurement (`--train.resize-every`), None = fixed."""
        self.cfg, self.ep = cfg, endpoint
        self.flow, self.mode, self.log, self.progress, self.ckpt = (
            flow,
            mode,
            log,
            progress,
            checkpointer,
        )
        kv = {
            "rollout": cfg.rollout.engine.kv_capacity_tokens,
            "reward": cfg.reward.engine.kv_capacity_tokens,
        }
        self.init_cluster(
            ReplicaTable.build(table, world_size, kv, profiles), cfg.planner.migration
        )
        self.versions = ReplicaVersions()  # rid -> the policy version its ranks read
        self.pending: dict[int, ShiftRecord] = {}  # rid -> its shift in flight
        self.awaiting: set[int] = set()  # aborted, partial not back yet
        self.deferred: dict[int, int] = {}  # seq id -> rid, dispatched once its partial is back
        self.sent_to: dict[int, int] = {}  # seq id -> rid running it
        self.judging_since: dict[int, float] = {}  # judge seq id -> its first dispatch (budget)
        self.version = start_step
        self.step = start_step
        self.progress_start = start_step  # steps up to it were trained by an earlier attempt
        self.training: int | None = None  # step in flight
        self.train_acks: dict[int, m.Trained] = {}
        self.train_splits = 0  # training steps split to fit device memory
        self.saving: set[int] = set()
        self.saved_files: list = []  # pivot.runtime.records.manifest.FileDigest of the checkpoint being written
        self.train_tokens_per_s = 0.0
        self.batch_summary: dict[str, float] = {}  # the step in flight's, for its metrics row
        self.stats: dict[int, m.Stats] = {}  # rid -> its latest report
        self.num_shifts = 0
        self.failed: str | None = None
        self._last_monitor = 0.0
        self._last_plan = 0.0
        self.reports = ControllerReports(log, progress)
        self.recovery = EngineRecovery(cfg.recovery.max_engine_failures, cfg.recovery.window_s)
        self.sizer = sizer
        self.resize_to: int | None = None  # the training slot's next size, decided by the sizer
        self.resize_step: int | None = None  # the step boundary whose checkpoint it waits for
        self.resize_checkpoint: str | None = None  # ... once committed
        self.resizes = 0

    # ---- messaging -------------------------------------------------------------------------
    def send_slot(self, rid: int, msg: m.ToWorker, leader_only: bool = False) -> None:
        ranks = self.table.replicas[rid].devices
        for rank in ranks[:1] if leader_only else ranks:
            self.ep.send(rank, msg)

    def broadcast(self, msg: m.ToWorker) -> None:
        for rank in range(self.world):
            self.ep.send(rank, msg)

    # ---- the loop --------------------------------------------------------------------------
    def run(self) -> None:
        hello: set[int] = set()
        while len(hello) < self.world:
            got = self.ep.recv(1000)
            if got and isinstance(got[1], m.Hello):
                hello.add(got[0])
        self.execute(self.mode.initial(self))
        if self.sizer is not None:  # on the engines' profiles; training as the model says
            self.sizer.start(self.allocation)
        self.submit(self.flow.start_eval(self.step))
        while (self.step < self.cfg.train.steps or self.flow.evals) and self.failed is None:
            got = self.ep.recv(5)
            while got is not None:
                self.handle(*got)
                got = self.ep.recv(0)
            self.tick()
        self.finish()

    def tick(self) -> None:
        self.submit(self.flow.fill(self.version, self.cfg.train.steps))
        self.apply(self.sched["rollout"].dispatch() + self.sched["reward"].dispatch())
        self.time_out_judges()
        self.maybe_train()
        for result in self.flow.eval_results:
            self.log.eval(result)
            self.progress.eval(result)
        self.flow.eval_results.clear()
        now = time.monotonic()
        if now - self._last_monitor >= MONITOR_EVERY_S:
            self._last_monitor = now
            self.monitor()
        self.poll_sizing()
        self.maybe_resize()
        if not self.shifts.states.in_flight and now - self._last_plan >= self.mode.interval_s:
            self._last_plan = now
            plan = self.mode.plan(self)
            if plan is not None:
                self.execute(plan)

    def submit(self, infos: list) -> None:
        for info in infos:
            self.sched[info.role].submit(info.state())

    def finish(self) -> None:
        # let the last checkpoint land, and every shift in flight finish: a Stop reaches a
        # replica of several ranks through its leader's forward, which waits for every follower,
        # so each rank must be settled in its slot (or out of it) when the Stop arrives
        while (self.saving or self.shifts.states.in_flight) and self.failed is None:
            got = self.ep.recv(100)
            if got is not None:
                self.handle(*got)
        self.broadcast(m.Stop(self.failed or "done"))
        self.log.shift(event="stop", reason=self.failed or "done")
        if self.sizer is not None:
            self.last_sizing()
            self.sizer.close()

    # ---- commands from the schedulers ------------------------------------------------------
    def apply(self, cmds: list) -> None:
        batches: dict[int, list] = {}
        for cmd in cmds:
            if isinstance(cmd, Abort):
                self.send_slot(
                    cmd.replica_id,
                    m.AbortSequences(self.table.slot_of(cmd.replica_id)[1], [cmd.seq_id]),
                    leader_only=True,
                )
                self.sent_to.pop(cmd.seq_id, None)
                self.deferred.pop(
                    cmd.seq_id, None
                )  # its target is leaving: the scheduler queues it or names another
                self.awaiting.add(cmd.seq_id)
            elif isinstance(cmd, Dispatch):
                if cmd.seq_id in self.awaiting:
                    self.deferred[cmd.seq_id] = cmd.replica_id
                else:
                    batches.setdefault(cmd.replica_id, []).append(cmd.seq_id)
        for rid, ids in batches.items():
            self.generate(rid, ids)

    def generate(self, rid: int, ids: list[int]) -> None:
        reqs = [self.flow.seqs[i].request for i in ids]
        now = time.monotonic()
        for i in ids:
            self.sent_to[i] = rid
            if self.flow.seqs[i].role == "reward":
                self.judging_since.setdefault(i, now)
        self.send_slot(rid, m.Generate(self.table.slot_of(rid)[1], reqs), leader_only=True)

    # ---- messages from workers -------------------------------------------------------------
    def handle(self, rank: int, msg: m.Message) -> None:
        if isinstance(msg, m.Finished):
            self.on_finished(msg)
        elif isinstance(msg, m.Stats):
            self.on_stats(msg)
        elif isinstance(msg, m.Aborted):
            self.on_partials(msg.partials, self.table.rid(msg.role, msg.slot))
        elif isinstance(msg, m.ShiftDone):
            self.on_shift_done(msg)
        elif isinstance(msg, m.Trained):
            self.on_trained(msg)
        elif isinstance(msg, m.WeightsUpdated):
            rid = self.table.rid("rollout", msg.slot)
            ranks = self.table.replicas[rid].devices
            what = f"rollout{msg.slot}"
            again = self.versions.updated(rid, msg.rank, msg.version, ranks, self.version, what)
            if again and self.is_up(rid):  # one shifting down reads the newest on its next way up
                self.update(rid)
        elif isinstance(msg, m.Saved):
            self.saving.discard(msg.rank)
            self.saved_files += msg.files
            if not self.saving:
                path = self.ckpt.commit(msg.step, self.saved_files)
                self.log.shift(event="checkpoint", step=msg.step, path=str(path))
                if msg.step == self.resize_step:
                    self.resize_checkpoint = str(path)
        elif isinstance(msg, m.EngineFailed):
            self.on_engine_failed(msg)
        elif isinstance(msg, m.Failed):
            first, _, trace = msg.error.partition("\n")  # a bug's traceback follows its line
            self.failed = f"rank {msg.rank} failed: {first}"
            print(f"pivot: {self.failed}" + (f"\n{trace}" if trace else ""), flush=True)

    def on_finished(self, msg: m.Finished) -> None:
        for out in msg.outputs:
            info = self.flow.seqs.get(out.id)
            if info is None:
                continue
            role = info.role
            if (
                self.sent_to.get(out.id) == self.table.rid(msg.role, msg.slot)
                or out.id in self.awaiting
            ):
                self.sent_to.pop(out.id, None)
                self.awaiting.discard(out.id)  # it finished before the abort reached it
                self.deferred.pop(out.id, None)
                self.sched[role].on_finish(out.id)
                self.submit(self.flow.on_output(out))

    def on_partials(self, partials: list, rid: int) -> None:
        current = self.versions.get(rid, self.version)
        for req in partials:
            if req.id not in self.flow.seqs:
                continue
            self.flow.on_partial(req, current)
            self.awaiting.discard(req.id)
            target = self.deferred.pop(req.id, None)
            if target is not None:
                self.generate(target, [req.id])

    def time_out_judges(self) -> None:
        """Stop every judging past `reward.timeout_s` since its first dispatch and score it the
        fallback (the flow counts it); its partial, if one comes back, is dropped as unknown."""
        limit, now = self.cfg.reward.timeout_s, time.monotonic()
        for sid, since in list(self.judging_since.items()):
            if sid not in self.flow.seqs:
                del self.judging_since[sid]  # finished
            elif limit and now - since > limit:
                del self.judging_since[sid]
                rid = self.sent_to.pop(sid, None)
                if rid is not None:
                    slot = self.table.slot_of(rid)[1]
                    self.send_slot(rid, m.AbortSequences(slot, [sid]), leader_only=True)
                self.awaiting.discard(sid)
                self.deferred.pop(sid, None)
                self.sched["reward"].on_finish(sid)
                self.submit(self.flow.on_timeout(sid))

    def on_stats(self, msg: m.Stats) -> None:
        rid = self.table.rid(msg.role, msg.slot)
        self.stats[rid] = msg
        self.versions.report(rid, msg.stats.weights_version)
        self.sched[msg.role].on_progress_many(
            (sid, generated)
            for sid, generated in msg.progress.items()
            if self.sent_to.get(sid) == rid
        )

    # ---- shifts (pivot/shift/executor.py) -----------------------------------------------------
    def execute(self, plan: ShiftPlan) -> None:
        self.shifts.execute(plan)
        self.num_shifts += 1
        self.log.shift(
            event="plan",
            up=[self.table.slot_of(r) for r in plan.up],
            down=[self.table.slot_of(r) for r in plan.down],
            benefit=plan.benefit,
            planner_s=plan.timings.total_s,
            training=self.training is not None,
        )

    def migrate_off(self, role: str, rids: list[int]) -> None:
        self.apply(self.sched[role].shift_down(rids))

    def release(self, rid: int) -> None:
        role, slot = self._begin(rid, up=False)
        # an inference leader forwards slot-wide messages to its followers (lockstep)
        self.send_slot(rid, m.ShiftDown(role, slot), leader_only=role != "train")

    def acquire(self, rid: int) -> None:
        role, slot = self._begin(rid, up=True)
        self.send_slot(rid, m.ShiftUp(role, slot, self.version))

    def _begin(self, rid: int, up: bool) -> tuple[str, int]:
        role, slot = self.table.slot_of(rid)
        self.pending[rid] = ShiftRecord(
            role, slot, up, time.monotonic(), set(self.table.replicas[rid].devices)
        )
        return role, slot

    def migrate_on(self, role: str, rids: list[int]) -> None:
        self.apply(self.sched[role].shift_up(rids))

    def on_shift_done(self, msg: m.ShiftDone) -> None:
        rid = self.table.rid(msg.role, msg.slot)
        rec = self.pending[rid]
        complete = rec.add(msg)
        if msg.partials:
            self.on_partials(msg.partials, rid)
        if not complete:
            return
        del self.pending[rid]
        if self.sizer is not None:
            devices = len(self.table.replicas[rid].devices)
            self.sizer.shifted(msg.role, msg.slot, msg.up, devices, rec.phases["total"])
        if msg.up and msg.role == "rollout":
            if self.versions.shifted_up(rid, rec.versions, self.version, f"rollout{msg.slot}"):
                self.update(rid)  # mixed, or a training step finished while it shifted up
        self.shifts.complete([rid])
        self.log.shift(**rec.event(msg, self.table.replicas[rid].devices))
        self.recovered(rid, msg)

    # ---- engine failures (pivot/runtime/control/recovery.py) ----------------------------------
    def on_engine_failed(self, msg: m.EngineFailed) -> None:
        """A replica's engine failed: shift it down (its sequences come back with their tokens
        through the abort path and continue elsewhere), then up with a new engine (`recovered`).
        One shifting already is left to its shift: a shift down hands back what it held, and
        the worker builds the engine anew on the slot's next shift up."""
        rid = self.table.rid(msg.role, msg.slot)
        up = self.is_up(rid) and rid not in self.pending
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
            self.execute(ShiftPlan(None, (), (rid,), 0.0, 0.0, PlanTimings()))

    def recovered(self, rid: int, msg: m.ShiftDone) -> None:
        """A shift of `rid` completed: if its engine's failure put it down, bring it back up
        with a new engine, or keep it out (too many failures); if that was its way back up,
        record the recovery's time."""
        role, slot = self.table.slot_of(rid)
        if msg.up:
            took = self.recovery.shifted_up(rid, time.monotonic())
            if took is not None:
                self.log.shift(event="engine_rebuilt", role=role, slot=slot, recover_s=took)
            return
        back = self.recovery.shifted_down(rid)
        if back:
            self.execute(ShiftPlan(Role(role), (rid,), (), 0.0, 0.0, PlanTimings()))
        elif back is not None:
            self.retired.add(rid)
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
            if not self.slots(role) or (
                static and not any(self.role_of(r) == role for r in self.up_slots())
            ):
                self.failed = f"no {role} replica is left: each failed too often and stays down"

    # ---- training --------------------------------------------------------------------------
    @property
    def training_in_flight(self) -> bool:
        return self.training is not None

    def train_throughput(self) -> float:
        return self.train_tokens_per_s

    def train_ready(self) -> bool:
        # a held-out evaluation of the current policy still running holds the step back: its
        # sequences queue after the step's rollouts, and the next weights would reach them
        return (
            self.training is None
            and self.step < self.cfg.train.steps
            and self.flow.buffer.ready(self.step)
            and self.step not in self.flow.evals
        )

    def maybe_train(self) -> None:
        if self.resize_due():
            return  # the slot moves at this step boundary first
        if self.train_ready() and self.is_up(self.train_rid):
            batch, self.batch_summary, records = self.flow.batch(self.step)
            self.log.samples(records)
            self.training, self.train_acks = self.step, {}
            self._train_t0 = time.monotonic()
            self.send_slot(self.train_rid, m.TrainStep(self.step, batch))

    def on_trained(self, msg: m.Trained) -> None:
        self.train_acks[msg.rank] = msg
        train_ranks = self.table.replicas[self.train_rid].devices
        if len(self.train_acks) < len(train_ranks):
            return
        lead = self.train_acks[train_ranks[0]]
        secs = time.monotonic() - self._train_t0
        self.train_tokens_per_s = lead.metrics.get("tokens", 0.0) / max(secs, 1e-9)
        self.version, self.training = lead.version, None
        self.step += 1  # records number a step by the steps done after it: 1 for the first
        if splits := int(lead.metrics.get("oom_splits", 0)):  # pivot/roles/oom_guard.py
            self.train_splits += splits
            budget = int(lead.metrics["micro_batch_tokens"])
            self.log.shift(event="train_split", step=self.step, micro_batch_tokens=budget)
        for rid in (r for r in self.up_slots() if self.role_of(r) == "rollout"):
            self.update(rid)
        self.report_step(self.step, lead.metrics, secs)
        if eval_due(self.step, self.cfg.train.steps, self.cfg.eval.every):
            self.submit(self.flow.start_eval(self.step))
        if self.sizer is not None:
            self.sizer.trained(len(train_ranks), secs, int(lead.metrics.get("tokens", 0.0)))
            if self.sizer.due(self.step):
                self.start_sizing()
        if self.resize_to is not None:  # the trainer's state moves through this checkpoint
            self.resize_step = self.step
        if self.ckpt.due(self.step, self.cfg.train.steps) or self.resize_step == self.step:
            path = self.ckpt.snapshot(
                self.step, {"step": self.step, "version": self.version, **self.flow.state_dict()}
            )
            self.saving, self.saved_files = set(train_ranks), []
            self.send_slot(self.train_rid, m.SaveCheckpoint(self.step, str(path)))

    # ---- the training slot sized by measurement (pivot/runtime/control/sizing.py) ---------------
    def poll_sizing(self) -> None:
        """A finished sizing: logged (every candidate's prediction), and its pick, if any, made
        the slot's next size."""
        done = self.sizer.poll() if self.sizer is not None else None
        if done is None:
            return
        sizing, pick = done
        self.log_sizing(sizing, pick)
        if pick is not None:  # its reserved split holds at once: it moves no state
            reserve(self.mode, self.world, pick.train_devices, pick.rollout_devices)
        if pick is not None and pick.train_devices != self.train_devices:
            self.resize_to = pick.train_devices
        elif self.resize_step is None:  # the newest sizing says stay: an earlier pick not begun
            self.resize_to = None
        if self.sizer.owed:  # from the slot as it is now
            self.start_sizing()

    def start_sizing(self) -> None:
        """A sizing from the slot as it is now (owed if one runs), unless the last step has
        trained: nothing is left to size."""
        assert self.sizer is not None
        if self.step < self.cfg.train.steps:
            self.sizer.start(self.allocation)

    def log_sizing(self, sizing: Sizing, pick: Allocation | None, ended: bool = False) -> None:
        """A finished sizing in the timeline: every candidate's prediction and the pick (`ended`:
        it landed after the run's last step, its pick not carried out but named as the flags
        that launch the next run there)."""
        print(f"pivot: {sizing.line()}", flush=True)
        advice = launch_flags(self.world, pick) if ended and pick is not None else ""
        self.log.shift(
            event="train_sizing",
            step=self.step,
            devices=sizing.current.train_devices,
            reserve=sizing.current.rollout_devices,
            predicted={label(p.alloc): round(p.throughput) for p in sizing.points},
            pick=label(pick) if pick is not None else None,
            cpu_s=round(sizing.cpu_s, 2),
            complete=sizing.complete,
            calibration=dataclasses.asdict(sizing.calibration),
            next_launch=advice,
        )

    def last_sizing(self) -> None:
        """The sizing in flight as the run ends, awaited and logged unless the run failed (its
        pick is the next launch's advice): at most `--train.sizing-budget-s` of CPU, on rank 0
        alone, the other ranks told to stop."""
        assert self.sizer is not None
        if self.failed is not None or not self.sizer.running:
            return
        print(
            f"pivot: the run has ended; awaiting the training slot's sizing in flight (at most "
            f"{self.cfg.train.sizing_budget_s:g} CPU-s) for the next launch's advice",
            flush=True,
        )
        done = self.sizer.wait()
        if done is not None:
            self.log_sizing(*done, ended=True)

    @property
    def allocation(self) -> Allocation:
        """The training slot's devices and rollout's reserved ones, as the sizing names them."""
        return Allocation(self.train_devices, rollout_reserve(self.mode))

    def resize_due(self) -> bool:
        """A decided re-size that may be carried out now or is being carried out: nothing
        trained in this attempt (GPS, or the checkpoint the launch resumed from, rebuilds the
        trainer anywhere), or the step boundary's checkpoint was asked for."""
        trained = self.step > self.progress_start
        return self.resize_to is not None and (not trained or self.resize_step is not None)

    def maybe_resize(self) -> None:
        """Carry out a due re-size once nothing trains or saves (`move_training_slot`: the
        trainer shifts down, the slot takes the last `resize_to` devices), then tell every rank;
        the planner brings the trainer up there like any shift up."""
        if not self.resize_due() or self.training is not None or self.saving:
            return
        if self.resize_step is not None and self.resize_checkpoint is None:
            return  # its checkpoint is not committed yet
        assert self.resize_to is not None
        was = self.train_devices
        if not self.move_training_slot(self.resize_to):
            return
        ranks = list(range(self.world - self.resize_to, self.world))
        self.broadcast(m.ResizeTraining(ranks, self.resize_checkpoint or ""))
        self.resizes += 1
        self.log.shift(
            event="train_resized",
            step=self.step,
            was=was,
            devices=len(ranks),
            checkpoint=self.resize_checkpoint or "",
        )
        print(
            f"pivot: training slot re-sized {was} -> {len(ranks)} devices after step {self.step}"
            + (f" (its state through {self.resize_checkpoint})" if self.resize_checkpoint else ""),
            flush=True,
        )
        self.resize_to = self.resize_step = self.resize_checkpoint = None

    def update(self, rid: int) -> None:
        """Tell a rollout replica to read the newest policy, every rank the same version."""
        slot = self.table.slot_of(rid)[1]
        self.send_slot(rid, m.UpdateWeights(slot, self.version), leader_only=True)

    # ---- reports (pivot/runtime/control/reports.py) --------------------------------------------------
    def report_step(self, step: int, train_metrics: dict[str, float], train_s: float) -> None:
        devices = self.shifts.states.devices_per_role()
        counters = {
            "policy_version": self.version,
            "shifts": self.num_shifts,
            **{f"devices/{k}": v for k, v in devices.items()},
            **self.batch_summary,
            **self.flow.metrics(),
            **kv_metrics(s.stats for s in self.stats.values()),
            "count/rejected_frames": self.ep.rejected,
            "count/mixed_versions": self.versions.mixed,
            "count/caught_up": self.versions.caught_up,
            **self.recovery.counters(),
            "count/train_oom_splits": self.train_splits,
            "count/train_resizes": self.resizes,
        }
        self.reports.step(step, train_metrics, train_s, devices, counters)

    def monitor(self) -> None:
        self.reports.sample(
            self.stats,
            self.role_of,
            self.is_up,
            self.shifts.states.devices_per_role(),
            step=self.step,
            aborted=self.flow.stats.aborted,
            migrated=self.flow.stats.migrated,
        )
