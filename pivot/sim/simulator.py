"""The discrete-event simulator: the real `ShiftAwareScheduler`s and planner on a simulated cluster.

    res = simulate(get_preset("qwen2.5-7b+qwen3-30b-a3b"), SimOptions(steps=4))
    res.throughput, res.step_end_s, res.timeline

It drives the same cluster as the runtime controller (pivot/runtime/controller.py): both are a
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

import copy
import time
from collections import Counter
from dataclasses import dataclass

from pivot.config import PivotConfig
from pivot.plan import ClusterSnapshot, ShiftPlan, overall_throughput
from pivot.plan.modes import Shiftable, make_mode
from pivot.sched import INFERENCE_ROLES, Abort, Command, Role, SeqState
from pivot.sched.records import step_major_id
from pivot.shift import ClusterHost
from pivot.sim import hardware as hwm
from pivot.sim.costs import build_cluster
from pivot.sim.engine_profile import with_engine
from pivot.sim.events import EventQueue
from pivot.sim.kv_move import kv_move_s_per_token
from pivot.sim.options import SimOptions
from pivot.sim.replica import SimReplica
from pivot.sim.result import ShiftEvent, SimResult, TimelinePoint
from pivot.sim.workload import SimSample, step_samples


@dataclass
class _Seq:
    role: Role
    sample: SimSample
    prompt_len: int
    target: int
    generated: int = 0


class Simulator(ClusterHost):
    def __init__(self, cfg: PivotConfig, opts: SimOptions = SimOptions()) -> None:
        self.cfg, self.opts = copy.deepcopy(cfg), opts
        self.cfg.planner.budget_s = 0.0  # simulated time: the search must not vary with the CPU
        self.steps = opts.steps if opts.steps is not None else cfg.train.steps
        if opts.warmup_steps >= self.steps:
            raise ValueError(
                f"SimOptions.warmup_steps={opts.warmup_steps}: need < steps={self.steps}"
            )
        hw = with_engine(opts.hardware, opts.engine)  # decode as the chosen engine runs it
        table, self.costs = build_cluster(self.cfg, hw, opts.kv_from_engine)
        self.init_cluster(table, self.cfg.planner.migration, clock=lambda: self.now)
        engines = {Role.ROLLOUT: self.cfg.rollout.engine, Role.REWARD: self.cfg.reward.engine}
        kv = (
            self.cfg.planner.kv_migration
        )  # aborted sequences' KV moves with them (pivot/sim/kv_move.py)
        self.reps = {
            s.replica_id: SimReplica(
                s.replica_id,
                s.model,
                s.kv_capacity,
                self.costs.roles[s.role].prefill_s_per_token,
                engines[s.role].max_running_seqs,
                opts.kv_headroom,
                kv_move_s_per_token(self.costs.roles[s.role].model, self.costs.roles[s.role].tp)
                if kv
                else None,
            )
            for s in table.replicas
            if s.role != Role.TRAIN and s.model is not None  # Replica checks it has one
        }
        self._kv_kept: dict[
            int, int
        ] = {}  # aborted, not yet re-dispatched: sid -> tokens of its KV
        self._role_reps: dict[str, list[SimReplica]] = {
            role: [self.reps[s.replica_id] for s in table.slots(role)] for role in INFERENCE_ROLES
        }
        self._stale: dict[str, set[int]] = {
            role: set() for role in INFERENCE_ROLES
        }  # progress not yet reported
        self.dev_free_at = [0.0] * table.world
        self.training = False
        self.train_tps = 0.0
        self.step = self.version = self.next_step = 0
        self.staleness = 0 if self.cfg.cluster.mode == "colocated" else self.cfg.train.staleness
        self.group = opts.workload.prompts(table.world) * opts.workload.group_size
        self.seqs: dict[int, _Seq] = {}
        self.samples: dict[int, list[SimSample]] = {}
        self.rewarded: Counter = Counter()
        self.now = 0.0
        self.events = EventQueue()
        self._next_sid = 0
        self._pending: dict[int, int] = {}  # replica -> version of its queued event
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
            self.staleness,
            warmup_steps=opts.warmup_steps,
            workload=opts.workload,
        )
        # steady state: later steps' prompts keep coming, as the steps after the last one would
        self.released = self.steps + (self.staleness if opts.warmup_steps else 0)

    # ------------------------------------------------------------------ the loop
    def run(self) -> SimResult:
        t0 = time.perf_counter()
        initial = self.mode.initial(self).up
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
            self._after_event()
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

    # ------------------------------------------------------------------ sequences
    def _fill(self) -> None:
        while self.next_step < self.released and self.next_step - self.version <= self.staleness:
            st = self.next_step
            self.samples[st] = step_samples(self.opts.workload, self.cfg.seed, st, self.world)
            for s in self.samples[st]:
                self._submit(_Seq(Role.ROLLOUT, s, s.prompt_len, s.response_len))
            self.next_step += 1

    def _submit(self, seq: _Seq) -> None:
        sid = step_major_id(seq.sample.step, self._next_sid)
        self._next_sid += 1
        self.seqs[sid] = seq
        self.sched[seq.role].submit(SeqState(sid, seq.prompt_len, 0))

    def _apply(self, role: str, cmds: list[Command]) -> None:
        touched: set[int] = set()
        for cmd in cmds:
            rep, sid = self.reps[cmd.replica_id], cmd.seq_id
            rep.advance(self.now)
            touched.add(rep.rid)
            seq = self.seqs[sid]
            if isinstance(cmd, Abort):
                self._kv_kept[sid] = rep.kv_held(sid)
                seq.generated = rep.abort(sid)
                self.res.aborts += 1
                self.sched[role].on_progress(sid, seq.generated)
            else:
                w = self.opts.workload
                prefixes = (
                    w.rollout_prefixes(seq.sample)
                    if role == Role.ROLLOUT
                    else w.judge_prefixes(seq.sample)
                )
                rep.add(
                    sid,
                    seq.prompt_len,
                    seq.generated,
                    seq.target,
                    self.now,
                    prefixes,
                    self._kv_kept.pop(sid, 0),
                )
        for rid in touched:
            self._schedule(rid)

    def _schedule(self, rid: int) -> None:
        rep = self.reps[rid]
        if self._pending.get(rid) == rep.ver:
            return  # an event for this very state is queued already
        t = rep.next_event()
        if t is not None:
            self._pending[rid] = rep.ver
            self.events.push(t, "rep", (rid, rep.ver))

    def _on_replica(self, rid: int, ver: int) -> None:
        rep = self.reps[rid]
        if rep.ver != ver:
            return  # superseded by a later change of this replica
        del self._pending[rid]
        rep.advance(self.now)
        role = self.role_of(rid)
        for sid in rep.finished():
            self._on_finish(role, sid)
        self._stale[role].add(rid)  # its progress reaches the scheduler before the next dispatch
        self._schedule(rid)

    def _on_finish(self, role: str, sid: int) -> None:
        seq = self.seqs.pop(sid)
        self.sched[role].on_finish(sid)
        key = (seq.sample.step, seq.sample.index)
        if role == Role.ROLLOUT:
            self.res.rollout_done[key] += 1
            s = seq.sample
            self._submit(_Seq(Role.REWARD, s, s.judge_prompt_len, s.judge_len))
        else:
            self.res.reward_done[key] += 1
            self.rewarded[seq.sample.step] += 1
            if seq.sample.step == self.step and self.rewarded[self.step] == self.group:
                self._plan_due = True

    def _queued(self, role: str) -> int:
        """Sequences of `role` waiting in the scheduler's queue (not on any replica)."""
        return self.sched[role].num_sequences() - sum(
            len(r.seqs) + len(r.waiting) for r in self._role_reps[role]
        )

    def _sync_stale(self, role: str) -> None:
        for rid in sorted(self._stale[role]):
            self._sync_replica(role, rid)

    def _sync_replica(self, role: str, rid: int) -> None:
        self._stale[role].discard(rid)
        rep, sched = self.reps[rid], self.sched[role]
        rep.advance(self.now)
        sched.on_progress_many(rep.progress())

    def _sync(self, role: str) -> None:
        for rid in self.sched[role].active_ids:
            self._sync_replica(role, rid)

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
        if self.train_ready() and self.is_up(self.train_rid):
            tokens = sum(s.train_tokens for s in self.samples[self.step])
            devices = len(self.table.replicas[self.train_rid].devices)
            dur = hwm.train_s(
                self.costs.policy, self.opts.hardware, devices, tokens, self.costs.train_forwards
            )
            self.training, self.train_tps = True, tokens / dur
            self.res.train_s.append(dur)
            self.events.push(self.now + dur, "train", ())

    def _on_trained(self) -> None:
        self.training, self.train_tps = False, 0.0
        self.step += 1
        self.version += 1
        self.res.step_end_s.append(self.now)
        self._plan_due = True

    # ------------------------------------------------------------------ planning and shifts
    def snapshot(self) -> ClusterSnapshot:
        for role in INFERENCE_ROLES:
            self._sync(role)
        return super().snapshot()

    def on_planned(self, snap: ClusterSnapshot, plan: ShiftPlan | None, wall_s: float) -> None:
        self.res.planner_calls += 1
        self.res.planner_wall_s += wall_s
        if self.opts.record_plans:
            self.res.plans.append((snap, plan))

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
