"""`SequenceRouter`: where each sequence runs, on the runtime. The schedulers' commands become
messages: a Dispatch a `Generate` to the replica's leader, an Abort an `AbortSequences`; a
worker's `Finished` output goes to the RL flow (which hands back the sequences it makes, a
judge for a rollout), its `Aborted` partials (the tokens generated so far) back into the flow,
and its `Stats` progress to the scheduler.

A sequence aborted on one replica is dispatched elsewhere only once its partial has come back
(`awaiting`, then `deferred` to its new replica), so nothing runs twice. An output counts only
from the replica the sequence was sent to (`sent_to`), or from the one it was aborted on if it
finished before the abort reached it. A judge running past `reward.timeout_s` since its first
dispatch (`judging_since`) is stopped and scored the fallback.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from pivot.runtime.control import messages as m
from pivot.sched.records import Abort, Command, Dispatch

if TYPE_CHECKING:  # annotations only
    from pivot.engine import Request
    from pivot.runtime.control.outbox import Outbox
    from pivot.runtime.flow.rl_flow import RLFlow
    from pivot.runtime.flow.sequences import SeqInfo
    from pivot.shift import Cluster


class SequenceRouter:
    def __init__(
        self, cluster: Cluster, outbox: Outbox, flow: RLFlow, judge_timeout_s: float
    ) -> None:
        """`judge_timeout_s`: `reward.timeout_s` (0: judges never time out)."""
        self.cluster, self.outbox, self.flow = cluster, outbox, flow
        self.judge_timeout_s = judge_timeout_s
        self.sent_to: dict[int, int] = {}  # seq id -> rid running it
        self.awaiting: set[int] = set()  # aborted, partial not back yet
        self.deferred: dict[int, int] = {}  # seq id -> rid, dispatched once its partial is back
        self.judging_since: dict[int, float] = {}  # judge seq id -> its first dispatch (budget)

    def submit(self, infos: list[SeqInfo]) -> None:
        """The flow's new sequences join their role's waiting queue."""
        for info in infos:
            self.cluster.sched[info.role].submit(info.state())

    def dispatch(self) -> None:
        """The waiting sequences of both roles onto their replicas, as the schedulers place them."""
        self.apply(
            self.cluster.sched["rollout"].dispatch() + self.cluster.sched["reward"].dispatch()
        )

    def apply(self, cmds: list[Command]) -> None:
        """The schedulers' commands (`Abort`, `Dispatch`), as messages."""
        batches: dict[int, list[int]] = {}
        for cmd in cmds:
            if isinstance(cmd, Abort):
                slot = self.cluster.table.slot_of(cmd.replica_id)[1]
                self.outbox.to_slot(
                    cmd.replica_id, m.AbortSequences(slot, [cmd.seq_id]), leader_only=True
                )
                self.sent_to.pop(cmd.seq_id, None)
                # its target is leaving: the scheduler queues it or names another
                self.deferred.pop(cmd.seq_id, None)
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
        slot = self.cluster.table.slot_of(rid)[1]
        self.outbox.to_slot(rid, m.Generate(slot, reqs), leader_only=True)

    def on_finished(self, msg: m.Finished) -> None:
        for out in msg.outputs:
            info = self.flow.seqs.get(out.id)
            if info is None:
                continue
            role = info.role
            if (
                self.sent_to.get(out.id) == self.cluster.table.rid(msg.role, msg.slot)
                or out.id in self.awaiting
            ):
                self.sent_to.pop(out.id, None)
                self.awaiting.discard(out.id)  # it finished before the abort reached it
                self.deferred.pop(out.id, None)
                self.cluster.sched[role].on_finish(out.id)
                self.submit(self.flow.on_output(out))

    def on_partials(self, partials: list[Request], current: int) -> None:
        """Aborted sequences came back with their tokens from a replica serving policy version
        `current`; one already placed elsewhere is dispatched there now."""
        for req in partials:
            if req.id not in self.flow.seqs:
                continue
            self.flow.on_partial(req, current)
            self.awaiting.discard(req.id)
            target = self.deferred.pop(req.id, None)
            if target is not None:
                self.generate(target, [req.id])

    def on_progress(self, msg: m.Stats, rid: int) -> None:
        """Tokens generated so far, for the sequences this replica runs."""
        self.cluster.sched[msg.role].on_progress_many(
            (sid, generated)
            for sid, generated in msg.progress.items()
            if self.sent_to.get(sid) == rid
        )

    def time_out_judges(self) -> None:
        """Stop every judging past `reward.timeout_s` since its first dispatch and score it the
        fallback (the flow counts it); its partial, if one comes back, is dropped as unknown."""
        limit, now = self.judge_timeout_s, time.monotonic()
        for sid, since in list(self.judging_since.items()):
            if sid not in self.flow.seqs:
                del self.judging_since[sid]  # finished
            elif limit and now - since > limit:
                del self.judging_since[sid]
                rid = self.sent_to.pop(sid, None)
                if rid is not None:
                    slot = self.cluster.table.slot_of(rid)[1]
                    self.outbox.to_slot(rid, m.AbortSequences(slot, [sid]), leader_only=True)
                self.awaiting.discard(sid)
                self.deferred.pop(sid, None)
                self.cluster.sched["reward"].on_finish(sid)
                self.submit(self.flow.on_timeout(sid))
