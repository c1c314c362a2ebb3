"""The discrete-event simulator: the real `ShiftAwareScheduler`s and planner on a simulated cluster.

    res = simulate(paper_preset("qwen2.5-7b+qwen3-30b-a3b"), SimOptions(steps=4))
    res.throughput, res.step_end_s, res.timeline

It drives the same cluster as the runtime controller (pivot/runtime/control/controller.py): both
hold a `Cluster` (pivot/shift/cluster.py), with the same replica table, replica states, shift
executor and schedulers, and drive the same deployment mode; the simulator supplies the shift
effects as timed events and says how training stands, and its `SimSequences` part
(pivot/sim/sequences.py) moves the sequences on the simulated replicas.
Prompts of step s are submitted once `s - version <= staleness` (0 in colocated mode); every
finished rollout becomes a GenRM sequence (its prompt holds the response); the scheduler's
Dispatch/Abort commands move sequences between simulated replicas (an abort keeps the
generated tokens and the next replica re-prefills them); a step trains when all B x G samples
are rewarded and the training slot is up; a plan releases every `down` replica now (the
scheduler migrates its sequences) and acquires every `up` slot once its devices are free,
each after its shift cost.

The planner runs under the runtime's gating (no shift in flight; during a training step the
mode keeps the trainer up, or with `plan_during_training=False` nothing is planned) at a
bounded rate: at ticks every `plan_every_s` of simulated time, and right after events (a
shift or a training step finished, a batch became ready), never twice within
`planner.interval_s`. The scheduler learns sequence progress at those points and, for the
replicas that finished a sequence since, before a dispatch with sequences waiting, like the
runtime's monitor: dispatch sees slightly stale loads (never staler than the replica's last event).

An agentic workload's tool calls are timed events too ("tool": no device work; the episode's
next turn is submitted when its tool returns), see pivot/sim/sequences.py.

Throughput = tokens of the trained samples (rollout prompt + response and tool responses, judge
prompt + response) / time until the last training step ends, or with `SimOptions.warmup_steps` over
the steady-state window after the warm-up steps; the same seed gives every deployment the
same samples, so throughput ratios are inverse time ratios. Sequence ids lead with their
step (`pivot.sched.records.step_major_id`), so the schedulers, which queue by id, serve the oldest step first.
"""

from __future__ import annotations

import copy
import time

from pivot.config import PivotConfig
from pivot.plan import ClusterSnapshot, ShiftPlan, overall_throughput
from pivot.plan.modes import Shiftable, make_mode, reserve
from pivot.sched import INFERENCE_ROLES, Role
from pivot.shift import Cluster
from pivot.sim.costs import build_cluster
from pivot.sim.engine_profile import with_engine
from pivot.sim.events import EventQueue
from pivot.sim.options import Resize, SimOptions
from pivot.sim.result import ShiftEvent, SimResult, TimelinePoint
from pivot.sim.sequences import SequenceWatch, SimSequences
from pivot.sim.sequences import _Seq as _Seq  # re-exported: tests submit sequences by hand


class Simulator:
    """The event loop over the simulated cluster (see the module docstring). It holds the
    `Cluster`, supplies its protocols (`ShiftHost`: each shift a timed event; `TrainingStatus`:
    the simulated trainer's), and trains, plans and re-sizes; `work` moves the sequences."""

    def __init__(
        self, cfg: PivotConfig, opts: SimOptions = SimOptions(), watch: SequenceWatch | None = None
    ) -> None:
        """`watch`: what a diagnostic run records of the sequences (None: nothing)."""
        self.cfg, self.opts = copy.deepcopy(cfg), opts
        self.cfg.planner.budget_s = 0.0  # simulated time: the search must not vary with the CPU
        self.steps = opts.steps if opts.steps is not None else cfg.train.steps
        if opts.warmup_steps >= self.steps:
            raise ValueError(
                f"SimOptions.warmup_steps={opts.warmup_steps}: need < steps={self.steps}"
            )
        hw = with_engine(opts.hardware, opts.engine)  # decode as the chosen engine runs it
        table, self.costs = build_cluster(self.cfg, hw, opts.kv_from_engine, opts.calibration)
        self.now = 0.0
        self.events = EventQueue()
        self.cluster = Cluster(
            table,
            effects=self,
            training=self,
            migrate=self.cfg.planner.migration,
            clock=lambda: self.now,
            refresh=self._report_progress,
        )
        self.dev_free_at = [0.0] * table.world
        self.training = False
        self._decisions: list[tuple[float, int]] = []  # sizing decisions: (made at, devices)
        self._resize_to: int | None = None  # a decision being carried out
        self.train_tps = 0.0
        self.step = self.version = 0
        staleness = 0 if self.cfg.cluster.mode == "colocated" else self.cfg.train.staleness
        self.mode = make_mode(self.cfg, on_planned=self.on_planned)
        self._cheap_mode = not isinstance(self.mode, Shiftable)
        self._plan_due, self._last_plan = True, float("-inf")
        self.res = SimResult(
            self.cfg.cluster.mode,
            self.cfg.planner.strategy,
            self.cfg.preset,
            hw.name,
            self.steps,
            table,
            self.costs,
            staleness,
            warmup_steps=opts.warmup_steps,
            workload=opts.workload,
        )
        self.work = SimSequences(
            cluster=self.cluster,
            cfg=self.cfg,
            opts=opts,
            costs=self.costs,
            events=self.events,
            res=self.res,
            clock=lambda: self.now,
            steps=self.steps,
            staleness=staleness,
            watch=watch,
        )

    # the planner's record: the mode calls it after every plan
    def on_planned(self, snap: ClusterSnapshot, plan: ShiftPlan | None, wall_s: float) -> None:
        self.res.planner_calls += 1
        self.res.planner_wall_s += wall_s
        if self.opts.record_plans:
            self.res.plans.append((snap, plan))

    # ------------------------------------------------------------------ the loop
    def run(self) -> SimResult:
        t0 = time.perf_counter()
        initial = self.mode.initial(self.cluster).up
        for r in self.opts.resizes:  # start-up decisions: made `delay_s` into the run
            if r.after_step == 0:
                self._decided(r.delay_s, r)
        self.res.initial_up = tuple(initial)
        self.cluster.shifts.bring_up(initial)
        self.events.push(0.0, "tick", ())
        while self.step < self.steps:
            if not self.events:
                raise RuntimeError(
                    f"simulation stalled at t={self.now:.1f}s, step {self.step} (no event left)"
                )
            t, kind, payload = self.events.pop()
            if t > self.opts.max_sim_s:
                raise RuntimeError(
                    f"simulation exceeded max_sim_s={self.opts.max_sim_s} at step {self.step}"
                )
            self.now = t
            if kind == "rep":
                rid, ver = payload
                if self.work.on_replica(rid, ver, self.step):
                    self._plan_due = True  # the batch the trainer waits for is complete
            elif kind == "shift":
                self._on_shifts_done([payload] + self.events.pop_same("shift", t))
            elif kind == "train":
                self._on_trained()
            elif kind == "tool":  # an agentic episode's tool call returned
                self.work.on_tool(*payload)
            elif kind == "tick":
                self._on_tick()
            elif kind == "resize":  # a sizing's decision arrived: its reserves hold from now
                self._reserve(payload[0])
            self._after_event()
        self.res.table, self.res.costs = self.cluster.table, self.costs  # re-sized, if it was
        self.res.finish(
            self.now,
            self.work.samples,
            self.work.reps,
            self.cluster.train_rid,
            time.perf_counter() - t0,
        )
        return self.res

    def _after_event(self) -> None:
        self.work.fill(self.version)
        self.work.dispatch()
        self._maybe_train()
        blocked = self.training and (self._cheap_mode or not self.opts.plan_during_training)
        if self.cluster.in_flight or blocked or not (self._plan_due or self._cheap_mode):
            return
        if self.now - self._last_plan < self.cfg.planner.interval_s and not self._cheap_mode:
            return
        self._plan_due, self._last_plan = False, self.now
        plan = self.mode.plan(self.cluster)
        if plan is not None and (plan.up or plan.down):
            self.res.num_plans += 1
            self.cluster.shifts.execute(plan)

    def _on_tick(self) -> None:
        self._plan_due = True
        self._sample()
        self.events.push(self.now + self.opts.plan_every_s, "tick", ())

    def _report_progress(self) -> None:
        """Before a planner's snapshot: every replica's progress reaches its scheduler."""
        self.work.sync_all()

    # ------------------------------------------------------------------ training (TrainingStatus)
    @property
    def training_in_flight(self) -> bool:
        return self.training

    def train_ready(self) -> bool:
        return not self.training and self.step < self.steps and self.work.batch_ready(self.step)

    def train_throughput(self) -> float:
        return self.train_tps

    def _maybe_train(self) -> None:
        if self.step == 0:  # nothing trained yet: a decision takes effect as soon as it is made
            self._take_decisions()
        if self._resize_to is not None:
            self._maybe_resize()
            return  # the slot trains again once it is re-sized
        if self.train_ready() and self.cluster.is_up(self.cluster.train_rid):
            tokens = sum(s.train_tokens for s in self.work.samples[self.step])
            dur = self.costs.train_s(self.cluster.train_devices, tokens)
            self.training, self.train_tps = True, tokens / dur
            self.res.train_s.append(dur)
            self.events.push(self.now + dur, "train", ())

    def _on_trained(self) -> None:
        self.training, self.train_tps = False, 0.0
        self.step += 1
        self.version += 1
        self.res.step_end_s.append(self.now)
        self._plan_due = True
        for r in self.opts.resizes:
            if r.after_step == self.step:
                self._decided(self.now + r.delay_s, r)
        self._take_decisions()  # a step boundary: the state is checkpointed here

    def _decided(self, at: float, r: Resize) -> None:
        self._decisions.append((at, r.train_devices))
        self.events.push(at, "resize", (r,))

    def _reserve(self, r: Resize) -> None:
        """The planner's reserved split of a decision (the runtime's `SlotResizer.poll`,
        pivot/runtime/control/slot_resizer.py, sets it as the decision arrives, as here)."""
        reserve(self.mode, self.cluster.world, r.train_devices, r.rollout_reserve)
        self._plan_due = True

    def _take_decisions(self) -> None:
        """The newest decision made by now becomes the pending re-size."""
        made = [d for d in self._decisions if d[0] <= self.now]
        if made:
            self._resize_to = made[-1][1]
            self._decisions = [d for d in self._decisions if d[0] > self.now]

    def _maybe_resize(self) -> None:
        """The pending re-size, as the runtime carries it out (`Cluster.move_training_slot`):
        the trainer's state goes through host memory at its shift down's cost, and its next
        shift up, on the new pool, costs the new size's."""
        devices, was = self._resize_to, self.cluster.train_devices
        assert devices is not None
        if not self.cluster.move_training_slot(devices):
            return
        if devices != was:
            self.costs = self.costs.resized(devices)
            self.res.resized_at_s.append(self.now)
        self._resize_to = None
        self._plan_due = True

    # ------------------------------------------------------------------ shifts (ShiftHost)
    # pivot/shift/executor.py: each shift is a timed event
    def migrate_off(self, role: str, rids: list[int]) -> None:
        self.work.migrate_off(role, rids)

    def release(self, rid: int) -> None:
        self.work.on_release(rid)  # its KV is discarded, parked contexts included
        self._start_shift(rid, False, self.now)

    def acquire(self, rid: int) -> None:
        devs = self.cluster.table.replicas[rid].devices
        self._start_shift(rid, True, max([self.now] + [self.dev_free_at[d] for d in devs]))

    def migrate_on(self, role: str, rids: list[int]) -> None:
        self.work.migrate_on(role, rids)

    def _start_shift(self, rid: int, up: bool, start: float) -> None:
        role = self.cluster.role_of(rid)
        end = start + self.costs.shift_s(role, up)
        for d in self.cluster.table.replicas[rid].devices:
            self.dev_free_at[d] = max(self.dev_free_at[d], end)
        self.res.shifts.append(ShiftEvent(start, end, rid, role, up))
        self.events.push(end, "shift", (rid, up))

    def _on_shifts_done(self, done: list[tuple[int, bool]]) -> None:
        """Shifts that complete at the same instant complete together (see `ShiftExecutor.complete`)."""
        self.cluster.shifts.complete([rid for rid, _ in done])
        self._plan_due = True

    # ------------------------------------------------------------------ timeline
    def _sample(self) -> None:
        devices = self.cluster.shifts.states.devices_per_role()
        tps: dict[str, float] = {Role.ROLLOUT: 0.0, Role.REWARD: 0.0}
        reps = self.work.reps
        for rid in self.cluster.up_slots():
            if rid in reps:
                rep = reps[rid]
                tps[self.cluster.role_of(rid)] += rep.m.throughput(rep.n, rep.tok)
        n_ro, n_rm = (self.cluster.sched[r].num_sequences() for r in INFERENCE_ROLES)
        overall = overall_throughput(n_ro, tps[Role.ROLLOUT], n_rm, tps[Role.REWARD])
        self.res.timeline.append(
            TimelinePoint(
                self.now, devices, tps[Role.ROLLOUT], tps[Role.REWARD], overall, self.training
            )
        )


def simulate(cfg: PivotConfig, opts: SimOptions = SimOptions()) -> SimResult:
    return Simulator(cfg, opts).run()
