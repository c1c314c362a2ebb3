"""The sequences' life on the simulated replicas (`SimSequences`, a part the `Simulator` holds,
pivot/sim/simulator.py): a step's samples submitted as rollouts while the staleness bound allows,
the schedulers' Dispatch/Abort commands applied to the replicas (an abort keeps the generated
tokens, and with `planner.kv_migration` their KV), each replica's next event scheduled, a finished
rollout turned into a GenRM sequence (its prompt holds the response), and the replicas' progress
reported to the schedulers: lazily, like the runtime's monitor, so dispatch sees slightly stale
loads (never staler than the replica's last event).

An agentic sample (`Workload.agentic`) is an episode of turns, each an ordinary rollout sequence
with its own id, as the runtime's turns are (pivot/runtime/flow/episodes.py): a turn that ends
before the episode's last leaves its replica (the scheduler forgets it: no replica, no queue, so
the planner does not see it) and its context stays parked there (pivot/sim/replica.py); its
tool runs for the drawn latency (a "tool" event, no device work) and then the next turn is
submitted with the grown context (prompt + every turn and tool response so far) as its prompt,
for the same scheduler to place. Only the last turn's end makes the GenRM sequence.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from pivot.config import PivotConfig
from pivot.sched import INFERENCE_ROLES, Abort, Command, Role, SeqState
from pivot.sched.records import step_major_id
from pivot.shift import Cluster
from pivot.sim.costs import SimCosts
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
    turn: int = 0
    """Its policy turn within an agentic episode (0: the first, or a single answer)."""


def rollout_turn(s: SimSample, turn: int = 0) -> _Seq:
    """The rollout sequence of `s`'s policy turn `turn`: its prompt is the prompt and everything
    after it so far (earlier turns and tool responses), its target that turn's tokens."""
    if s.episode is None:
        return _Seq(Role.ROLLOUT, s, s.prompt_len, s.response_len)
    ep = s.episode
    return _Seq(Role.ROLLOUT, s, s.prompt_len + ep.context_before(turn), ep.turns[turn], turn=turn)


def episode_key(s: SimSample) -> tuple[str, int, int]:
    """The key of `s`'s parked context on a replica."""
    return ("episode", s.step, s.index)


def parked_tokens(s: SimSample, turn: int) -> int:
    """Tokens of KV `s`'s episode leaves parked when policy turn `turn` ends for a tool call: its
    context then, but its last token (sampled, not yet computed)."""
    assert s.episode is not None
    return s.prompt_len + s.episode.context_before(turn) + s.episode.turns[turn] - 1


class SequenceWatch(Protocol):
    """What a diagnostic run records of the sequences (tools/bench_bound.py `--tails`)."""

    def released(self, step: int, now: float) -> None:
        """Step `step`'s prompts were submitted at `now`."""

    def dispatched(self, sid: int, now: float) -> None:
        """Sequence `sid` was dispatched to a replica at `now`."""

    def finished(self, role: str, sample: SimSample, sid: int, now: float) -> None:
        """`role`'s sequence `sid` of `sample` finished at `now`."""


class SimSequences:
    def __init__(
        self,
        *,
        cluster: Cluster,
        cfg: PivotConfig,
        opts: SimOptions,
        costs: SimCosts,
        events: EventQueue,
        res: SimResult,
        clock: Callable[[], float],
        steps: int,
        staleness: int,
        watch: SequenceWatch | None = None,
    ) -> None:
        """One simulated replica per inference slot of `cluster` (its engine's costs in `costs`);
        a step's prompts are released while `step - version <= staleness`, up to `steps` (plus
        the staleness with `opts.warmup_steps`: later steps' prompts keep coming, as the steps
        after the last one would); `events` takes each replica's next event, `res` the counts."""
        self.cluster, self.cfg, self.opts = cluster, cfg, opts
        self.events, self.res, self.clock, self.watch = events, res, clock, watch
        table = cluster.table
        engines = {Role.ROLLOUT: cfg.rollout.engine, Role.REWARD: cfg.reward.engine}
        kv = (
            cfg.planner.kv_migration
        )  # aborted sequences' KV moves with them (pivot/sim/kv_move.py)
        self.reps = {
            s.replica_id: SimReplica(
                s.replica_id,
                s.model,
                s.kv_capacity,
                costs.roles[s.role].prefill_s_per_token,
                engines[s.role].max_running_seqs,
                opts.kv_headroom,
                kv_move_s_per_token(costs.roles[s.role].model, costs.roles[s.role].tp)
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
        self._stale: dict[str, set[int]] = {  # progress not yet reported
            role: set() for role in INFERENCE_ROLES
        }
        self.staleness = staleness
        self.next_step = 0
        self.released = steps + (staleness if opts.warmup_steps else 0)
        self.group = opts.workload.prompts(table.world) * opts.workload.group_size
        self.seqs: dict[int, _Seq] = {}
        self.samples: dict[int, list[SimSample]] = {}
        self.rewarded: Counter = Counter()
        self._next_sid = 0
        self._pending: dict[int, int] = {}  # replica -> version of its queued event

    def batch_ready(self, step: int) -> bool:
        """Every sample of step `step` is rewarded."""
        return self.rewarded[step] == self.group

    def fill(self, version: int) -> None:
        """Submit the prompts of the steps the staleness bound allows at policy `version`."""
        while self.next_step < self.released and self.next_step - version <= self.staleness:
            st = self.next_step
            self.samples[st] = step_samples(
                self.opts.workload, self.cfg.seed, st, self.cluster.world
            )
            if self.watch is not None:
                self.watch.released(st, self.clock())
            for s in self.samples[st]:
                self.submit(rollout_turn(s))
            self.next_step += 1

    def submit(self, seq: _Seq) -> None:
        sid = step_major_id(seq.sample.step, self._next_sid)
        self._next_sid += 1
        self.seqs[sid] = seq
        self.cluster.sched[seq.role].submit(SeqState(sid, seq.prompt_len, 0))

    def dispatch(self) -> None:
        """Each role's waiting sequences onto its replicas; while sequences wait, the progress of
        the replicas that finished one since reaches the scheduler first."""
        for role in INFERENCE_ROLES:
            if self._stale[role] and self._queued(role):
                self.sync_stale(role)
            self.apply(role, self.cluster.sched[role].dispatch())

    def migrate_off(self, role: str, rids: list[int]) -> None:
        """`role`'s replicas `rids` leave (Algorithm 3), on their progress as of now."""
        self.sync_stale(role)
        self.apply(role, self.cluster.sched[role].shift_down(rids))

    def migrate_on(self, role: str, rids: list[int]) -> None:
        """`role`'s replicas `rids` join (Algorithm 4), on every replica's progress as of now."""
        self.sync(role)
        self.apply(role, self.cluster.sched[role].shift_up(rids))

    def apply(self, role: str, cmds: list[Command]) -> None:
        now = self.clock()
        touched: set[int] = set()
        for cmd in cmds:
            rep, sid = self.reps[cmd.replica_id], cmd.seq_id
            rep.advance(now)
            touched.add(rep.rid)
            seq = self.seqs[sid]
            if isinstance(cmd, Abort):
                self._kv_kept[sid] = rep.kv_held(sid)
                seq.generated = rep.abort(sid)
                self.res.aborts += 1
                self.cluster.sched[role].on_progress(sid, seq.generated)
            else:
                if self.watch is not None:
                    self.watch.dispatched(sid, now)
                w = self.opts.workload
                prefixes = (
                    w.rollout_prefixes(seq.sample)
                    if role == Role.ROLLOUT
                    else w.judge_prefixes(seq.sample)
                )
                resume = (  # an episode's next turn, not yet started: its context may be parked
                    (episode_key(seq.sample), parked_tokens(seq.sample, seq.turn - 1))
                    if seq.turn > 0 and seq.generated == 0
                    else None
                )
                rep.add(
                    sid,
                    seq.prompt_len,
                    seq.generated,
                    seq.target,
                    now,
                    prefixes,
                    self._kv_kept.pop(sid, 0),
                    resume,
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

    def on_replica(self, rid: int, ver: int, step: int) -> bool:
        """Replica `rid`'s event of state `ver`: its finished sequences move on. Returns whether
        one of them completed the batch of `step` (the step the trainer waits for)."""
        rep = self.reps[rid]
        if rep.ver != ver:
            return False  # superseded by a later change of this replica
        del self._pending[rid]
        rep.advance(self.clock())
        role = self.cluster.role_of(rid)
        completed = False
        for sid in rep.finished():
            completed = self._on_finish(role, sid, step, rep) or completed
        self._stale[role].add(rid)  # its progress reaches the scheduler before the next dispatch
        self._schedule(rid)
        return completed

    def _on_finish(self, role: str, sid: int, step: int, rep: SimReplica) -> bool:
        seq = self.seqs.pop(sid)
        self.cluster.sched[role].on_finish(sid)
        ep = seq.sample.episode
        if role == Role.ROLLOUT and ep is not None and seq.turn + 1 < len(ep.turns):
            # a tool call: the turn leaves the replica, its context stays parked there
            rep.park(episode_key(seq.sample), parked_tokens(seq.sample, seq.turn))
            self.res.tool_calls += 1
            self.res.tool_s += ep.tool_s[seq.turn]
            self.events.push(self.clock() + ep.tool_s[seq.turn], "tool", (seq.sample, seq.turn + 1))
            return False
        if self.watch is not None:
            self.watch.finished(role, seq.sample, sid, self.clock())
        key = (seq.sample.step, seq.sample.index)
        if role == Role.ROLLOUT:
            self.res.rollout_done[key] += 1
            s = seq.sample
            self.submit(_Seq(Role.REWARD, s, s.judge_prompt_len, s.judge_len))
            return False
        self.res.reward_done[key] += 1
        self.rewarded[seq.sample.step] += 1
        return seq.sample.step == step and self.batch_ready(step)

    def on_tool(self, sample: SimSample, turn: int) -> None:
        """A tool call of `sample`'s episode returned: its policy turn `turn` joins the rollout
        queue with the grown context."""
        self.submit(rollout_turn(sample, turn))

    def on_release(self, rid: int) -> None:
        """Replica `rid` shifts down: the contexts parked on it go with its KV."""
        if rid in self.reps:
            self.reps[rid].drop_parked()

    def _queued(self, role: str) -> int:
        """Sequences of `role` waiting in the scheduler's queue (not on any replica)."""
        return self.cluster.sched[role].num_sequences() - sum(
            len(r.seqs) + len(r.waiting) for r in self._role_reps[role]
        )

    def sync_stale(self, role: str) -> None:
        for rid in sorted(self._stale[role]):
            self._sync_replica(role, rid)

    def _sync_replica(self, role: str, rid: int) -> None:
        self._stale[role].discard(rid)
        rep, sched = self.reps[rid], self.cluster.sched[role]
        rep.advance(self.clock())
        sched.on_progress_many(rep.progress())

    def sync(self, role: str) -> None:
        for rid in self.cluster.sched[role].active_ids:
            self._sync_replica(role, rid)

    def sync_all(self) -> None:
        """Every replica's progress to its scheduler (before a planner's snapshot)."""
        for role in INFERENCE_ROLES:
            self.sync(role)
