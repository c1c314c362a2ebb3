"""The simulated cluster under `Simulator` (pivot/sim/simulator.py): its replicas, schedulers,
deployment mode and step state, built from the config, and the sequences' life on the replicas:
a step's samples submitted as rollouts, the schedulers' Dispatch/Abort commands applied, each
replica's next event scheduled, a finished rollout turned into a GenRM sequence, and progress
reported to the schedulers. `Simulator` adds the event loop, training, planning and shifts.
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass

from pivot.config import PivotConfig
from pivot.plan import ClusterSnapshot, ShiftPlan
from pivot.plan.modes import Shiftable, make_mode
from pivot.sched import INFERENCE_ROLES, Abort, Command, Role, SeqState
from pivot.sched.records import step_major_id
from pivot.shift import ClusterHost
from pivot.sim.costs import build_cluster
from pivot.sim.engine_profile import with_engine
from pivot.sim.events import EventQueue
from pivot.sim.kv_move import kv_move_s_per_token
from pivot.sim.options import SimOptions
from pivot.sim.replica import SimReplica
from pivot.sim.result import SimResult
from pivot.sim.workload import SimSample, step_samples


@dataclass
class _Seq:
    role: Role
    sample: SimSample
    prompt_len: int
    target: int
    generated: int = 0


class SimCluster(ClusterHost):
    """The simulated cluster's state and its sequences (see the module docstring)."""

    def __init__(self, cfg: PivotConfig, opts: SimOptions = SimOptions()) -> None:
        self.cfg, self.opts = copy.deepcopy(cfg), opts
        self.cfg.planner.budget_s = 0.0  # simulated time: the search must not vary with the CPU
        self.steps = opts.steps if opts.steps is not None else cfg.train.steps
        if opts.warmup_steps >= self.steps:
            raise ValueError(
                f"SimOptions.warmup_steps={opts.warmup_steps}: need < steps={self.steps}"
            )
        hw = with_engine(opts.hardware, opts.engine)  # decode as the chosen engine runs it
        table, self.costs = build_cluster(self.cfg, hw, opts.kv_from_engine, opts.calibration)
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
        self._decisions: list[tuple[float, int]] = []  # sizing decisions: (made at, devices)
        self._resize_to: int | None = None  # a decision being carried out
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

    # the planner's record: the mode calls it after every plan
    def on_planned(self, snap: ClusterSnapshot, plan: ShiftPlan | None, wall_s: float) -> None:
        self.res.planner_calls += 1
        self.res.planner_wall_s += wall_s
        if self.opts.record_plans:
            self.res.plans.append((snap, plan))

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
