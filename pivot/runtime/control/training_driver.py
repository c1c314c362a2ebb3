"""`TrainingDriver`: training steps and checkpoints, as the controller drives them.

A step starts once its batch is complete (every sample of the step rewarded, no held-out
evaluation of the current policy still running: its sequences queue after the step's rollouts,
and the next weights would reach them) and the training slot is up: the flow's batch goes to
every training rank in a `TrainStep`. It ends when every training rank has answered `Trained`:
the policy version moves on, and the step is handed back (`TrainedStep`) for the controller to
update the rollout replicas, report, and ask for the checkpoint (`checkpoint`), which every
training rank writes (`SaveCheckpoint`) and the controller commits once all have said `Saved`.

The driver is also the cluster's view of training (`in_flight`, `ready`, `tokens_per_s`: the
controller answers `pivot.shift.TrainingStatus` from them).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pivot.runtime.control import messages as m

if TYPE_CHECKING:  # annotations only
    from pivot.runtime.control.outbox import Outbox
    from pivot.runtime.flow.rl_flow import RLFlow
    from pivot.runtime.records.checkpoint import Checkpointer
    from pivot.runtime.records.manifest import FileDigest
    from pivot.runtime.records.metrics import RunLog
    from pivot.shift import Cluster


@dataclass(frozen=True)
class TrainedStep:
    """A training step every training rank has finished."""

    step: int
    """Steps done after it (records number a step so: 1 for the first)."""
    metrics: dict[str, float]
    """The training metrics of the slot's leader."""
    secs: float
    """From its `TrainStep` to the last rank's `Trained`."""
    devices: int
    """Ranks of the training slot that ran it."""


class TrainingDriver:
    def __init__(
        self,
        *,
        cluster: Cluster,
        outbox: Outbox,
        flow: RLFlow,
        log: RunLog,
        checkpointer: Checkpointer,
        total_steps: int,
        start_step: int,
    ) -> None:
        """`start_step`: the steps an earlier attempt trained (its checkpoint's; 0 fresh)."""
        self.cluster, self.outbox, self.flow, self.log = cluster, outbox, flow, log
        self.ckpt, self.total_steps = checkpointer, total_steps
        self.version = start_step  # the newest policy's (a resume sets its checkpoint's)
        self.step = start_step
        self.progress_start = start_step  # steps up to it were trained by an earlier attempt
        self.running: int | None = None  # step in flight
        self.acks: dict[int, m.Trained] = {}
        self._t0 = 0.0
        self.splits = 0  # training steps split to fit device memory
        self.tokens_per_s = 0.0
        self.batch_summary: dict[str, float] = {}  # the step in flight's, for its metrics row
        self.saving: set[int] = set()  # training ranks whose checkpoint files are not in yet
        self.saved_files: list[FileDigest] = []  # of the checkpoint being written

    @property
    def in_flight(self) -> bool:
        """A training step is running."""
        return self.running is not None

    @property
    def finished(self) -> bool:
        """Every step of the run has trained."""
        return self.step >= self.total_steps

    @property
    def trained(self) -> bool:
        """This attempt has trained a step."""
        return self.step > self.progress_start

    def ready(self) -> bool:
        """The next step's batch is complete and no step is running."""
        # a held-out evaluation of the current policy still running holds the step back: its
        # sequences queue after the step's rollouts, and the next weights would reach them
        return (
            self.running is None
            and not self.finished
            and self.flow.buffer.ready(self.step)
            and self.step not in self.flow.evals
        )

    def maybe_start(self) -> None:
        """Start the next step if its batch is ready and the training slot is up."""
        rid = self.cluster.train_rid
        if self.ready() and self.cluster.is_up(rid):
            batch, self.batch_summary, records = self.flow.batch(self.step)
            self.log.samples(records)
            self.running, self.acks = self.step, {}
            self._t0 = time.monotonic()
            self.outbox.to_slot(rid, m.TrainStep(self.step, batch))

    def on_trained(self, msg: m.Trained) -> TrainedStep | None:
        """One training rank's answer; the step once every rank's is in (None before)."""
        self.acks[msg.rank] = msg
        ranks = self.cluster.table.replicas[self.cluster.train_rid].devices
        if len(self.acks) < len(ranks):
            return None
        lead = self.acks[ranks[0]]
        secs = time.monotonic() - self._t0
        self.tokens_per_s = lead.metrics.get("tokens", 0.0) / max(secs, 1e-9)
        self.version, self.running = lead.version, None
        self.step += 1  # records number a step by the steps done after it: 1 for the first
        if splits := int(lead.metrics.get("oom_splits", 0)):  # pivot/roles/oom_guard.py
            self.splits += splits
            budget = int(lead.metrics["micro_batch_tokens"])
            self.log.shift(event="train_split", step=self.step, micro_batch_tokens=budget)
        return TrainedStep(self.step, lead.metrics, secs, len(ranks))

    def checkpoint(self, force: bool) -> None:
        """Checkpoint the step just trained if one is due (`--train.checkpoint-every`, the last
        step) or `force`d (a re-size's state moves through it): the controller's state now,
        the trainer's from every training rank."""
        if not (self.ckpt.due(self.step, self.total_steps) or force):
            return
        state = {"step": self.step, "version": self.version, **self.flow.state_dict()}
        path = self.ckpt.snapshot(self.step, state)
        rid = self.cluster.train_rid
        self.saving, self.saved_files = set(self.cluster.table.replicas[rid].devices), []
        self.outbox.to_slot(rid, m.SaveCheckpoint(self.step, str(path)))

    def on_saved(self, msg: m.Saved) -> str | None:
        """One training rank's files are written; the checkpoint's path once it is committed
        (every rank's in; None before)."""
        self.saving.discard(msg.rank)
        self.saved_files += msg.files
        if self.saving:
            return None
        path = self.ckpt.commit(msg.step, self.saved_files)
        self.log.shift(event="checkpoint", step=msg.step, path=str(path))
        return str(path)
