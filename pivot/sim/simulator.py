"""The discrete-event simulator: the real `ShiftAwareScheduler`s and planner on a simulated cluster.

    res = simulate(paper_preset("qwen2.5-7b+qwen3-30b-a3b"), SimOptions(steps=4))
    res.throughput, res.step_end_s, res.timeline

It drives the same cluster as the runtime controller (pivot/runtime/control/controller.py): both are a
`ClusterHost` (pivot/shift/host.py), with the same replica table, replica states, shift
executor, schedulers and deployment mode; the simulator's shift effects are timed events.
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

Throughput = tokens of the trained samples (rollout prompt + response, judge prompt +
response) / time until the last training step ends, or with `SimOptions.warmup_steps` over
the steady-state window after the warm-up steps; the same seed gives every deployment the
same samples, so throughput ratios are inverse time ratios. Sequence ids lead with their
step (`pivot.sched.records.step_major_id`), so the schedulers, which queue by id, serve the oldest step first.
"""

from __future__ import annotations

import time

from pivot.config import PivotConfig
from pivot.plan import ClusterSnapshot, overall_throughput
from pivot.plan.modes import reserve
from pivot.sched import INFERENCE_ROLES, Role
from pivot.sim.cluster import SimCluster
from pivot.sim.cluster import _Seq as _Seq  # re-exported: tests submit sequences by hand
from pivot.sim.options import Resize, SimOptions
from pivot.sim.result import ShiftEvent, SimResult, TimelinePoint


class Simulator(SimCluster):
    """The event loop over the simulated cluster (see the module docstring)."""

    # ------------------------------------------------------------------ the loop
    def run(self) -> SimResult:
        t0 = time.perf_counter()
        initial = self.mode.initial(self).up
        for r in self.opts.resizes:  # start-up decisions: made `delay_s` into the run
            if r.after_step == 0:
                self._decided(r.delay_s, r)
        self.res.initial_up = tuple(initial)
        self.shifts.bring_up(initial)
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
                self._on_replica(*payload)
            elif kind == "shift":
                self._on_shifts_done([payload] + self.events.pop_same("shift", t))
            elif kind == "train":
                self._on_trained()
            elif kind == "tick":
                self._on_tick()
            elif kind == "resize":  # a sizing's decision arrived: its reserves hold from now
                self._reserve(payload[0])
            self._after_event()
        self.res.table, self.res.costs = self.table, self.costs  # re-sized, if it was
        self.res.finish(self.now, self.samples, self.reps, self.train_rid, time.perf_counter() - t0)
        return self.res

    def _after_event(self) -> None:
        self._fill()
        for role in INFERENCE_ROLES:
            if self._stale[role] and self._queued(role):
                self._sync_stale(role)
            self._apply(role, self.sched[role].dispatch())
        self._maybe_train()
        blocked = self.training and (self._cheap_mode or not self.opts.plan_during_training)
        if self.shifts.states.in_flight or blocked or not (self._plan_due or self._cheap_mode):
            return
        if self.now - self._last_plan < self.cfg.planner.interval_s and not self._cheap_mode:
            return
        self._plan_due, self._last_plan = False, self.now
        plan = self.mode.plan(self)
        if plan is not None and (plan.up or plan.down):
            self.res.num_plans += 1
            self.shifts.execute(plan)

    def _on_tick(self) -> None:
        self._plan_due = True
        self._sample()
        self.events.push(self.now + self.opts.plan_every_s, "tick", ())

    # ------------------------------------------------------------------ training
    @property
    def training_in_flight(self) -> bool:
        return self.training

    def train_ready(self) -> bool:
        return (
            not self.training and self.step < self.steps and self.rewarded[self.step] == self.group
        )

    def train_throughput(self) -> float:
        return self.train_tps

    def _maybe_train(self) -> None:
        if self.step == 0:  # nothing trained yet: a decision takes effect as soon as it is made
            self._take_decisions()
        if self._resize_to is not None:
            self._maybe_resize()
            return  # the slot trains again once it is re-sized
        if self.train_ready() and self.is_up(self.train_rid):
            tokens = sum(s.train_tokens for s in self.samples[self.step])
            devices = len(self.table.replicas[self.train_rid].devices)
            dur = self.costs.train_s(devices, tokens)
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
        """The planner's reserved split of a decision (pivot/runtime/control/controller.py
        `poll_sizing` sets it as the decision arrives, as here)."""
        reserve(self.mode, self.world, r.train_devices, r.rollout_reserve)
        self._plan_due = True

    def _take_decisions(self) -> None:
        """The newest decision made by now becomes the pending re-size."""
        made = [d for d in self._decisions if d[0] <= self.now]
        if made:
            self._resize_to = made[-1][1]
            self._decisions = [d for d in self._decisions if d[0] > self.now]

    def _maybe_resize(self) -> None:
        """The pending re-size, as the runtime carries it out (`ClusterHost.move_training_slot`):
        the trainer's state goes through host memory at its shift down's cost, and its next
        shift up, on the new pool, costs the new size's."""
        devices, was = self._resize_to, self.train_devices
        assert devices is not None
        if not self.move_training_slot(devices):
            return
        if devices != was:
            self.costs = self.costs.resized(devices)
            self.res.resized_at_s.append(self.now)
        self._resize_to = None
        self._plan_due = True

    # ------------------------------------------------------------------ planning and shifts
    def snapshot(self) -> ClusterSnapshot:
        for role in INFERENCE_ROLES:
            self._sync(role)
        return super().snapshot()

    # ShiftHost (pivot/shift/executor.py): each shift is a timed event
    def migrate_off(self, role: str, rids: list[int]) -> None:
        self._sync_stale(role)
        self._apply(role, self.sched[role].shift_down(rids))

    def release(self, rid: int) -> None:
        self._start_shift(rid, False, self.now)

    def acquire(self, rid: int) -> None:
        devs = self.table.replicas[rid].devices
        self._start_shift(rid, True, max([self.now] + [self.dev_free_at[d] for d in devs]))

    def migrate_on(self, role: str, rids: list[int]) -> None:
        self._sync(role)
        self._apply(role, self.sched[role].shift_up(rids))

    def _start_shift(self, rid: int, up: bool, start: float) -> None:
        role = self.role_of(rid)
        end = start + self.costs.shift_s(role, up)
        for d in self.table.replicas[rid].devices:
            self.dev_free_at[d] = max(self.dev_free_at[d], end)
        self.res.shifts.append(ShiftEvent(start, end, rid, role, up))
        self.events.push(end, "shift", (rid, up))

    def _on_shifts_done(self, done: list[tuple[int, bool]]) -> None:
        """Shifts that complete at the same instant complete together (see `ShiftExecutor.complete`)."""
        self.shifts.complete([rid for rid, _ in done])
        self._plan_due = True

    # ------------------------------------------------------------------ timeline
    def _sample(self) -> None:
        devices = self.shifts.states.devices_per_role()
        tps: dict[str, float] = {Role.ROLLOUT: 0.0, Role.REWARD: 0.0}
        for rid in self.up_slots():
            if rid in self.reps:
                rep = self.reps[rid]
                tps[self.role_of(rid)] += rep.m.throughput(rep.n, rep.tok)
        n_ro, n_rm = (self.sched[r].num_sequences() for r in INFERENCE_ROLES)
        overall = overall_throughput(n_ro, tps[Role.ROLLOUT], n_rm, tps[Role.REWARD])
        self.res.timeline.append(
            TimelinePoint(
                self.now, devices, tps[Role.ROLLOUT], tps[Role.REWARD], overall, self.training
            )
        )


def simulate(cfg: PivotConfig, opts: SimOptions = SimOptions()) -> SimResult:
    return Simulator(cfg, opts).run()
