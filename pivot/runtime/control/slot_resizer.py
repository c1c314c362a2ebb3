"""`SlotResizer`: the training slot sized by measurement in a run, carried out (`--train.devices
auto`, `--train.resize-every`; the sizing itself is `SlotSizer`'s, pivot/runtime/control/sizing.py).

It feeds the sizer what the run measures (training steps, shifts), starts a sizing at start-up,
after step 1 and every `resize-every` steps after (one due while another runs is owed: it
starts as that one lands, unless the last step has trained), and logs each that lands (every
candidate's prediction, the pick). A pick for the same slot holds its reserved split at once
(it moves no state). A new slot size (`resize_to`) and its split wait for a step boundary (the
slot's reserve is dropped meanwhile: a split of the new slot's inference devices may not fit
the old slot's): nothing trained in this attempt yet (GPS, or the checkpoint the launch
resumed from, rebuilds the trainer anywhere), or the checkpoint of the step the decision met
(`resize_step`, committed as `resize_checkpoint`), through which the trainer's state moves.
Once nothing trains or saves, the trainer shifts down, the slot takes the last `resize_to`
devices, its split holds, and every rank is told (`ResizeTraining`); the planner brings the
trainer up there like any shift up. The run's end awaits the sizing in
flight, so its pick is the next launch's advice.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from pivot.plan.modes import reserve, rollout_reserve
from pivot.runtime.control import messages as m
from pivot.runtime.control.sizing import launch_flags
from pivot.sim.autosize import Sizing, label
from pivot.sim.deploy import Allocation

if TYPE_CHECKING:  # annotations only
    from pivot.config import TrainConfig
    from pivot.plan.modes import Mode
    from pivot.runtime.control.outbox import Outbox
    from pivot.runtime.control.sizing import SlotSizer
    from pivot.runtime.control.training_driver import TrainedStep, TrainingDriver
    from pivot.runtime.control.worker_shifts import WorkerShifts
    from pivot.runtime.records.metrics import RunLog
    from pivot.shift import Cluster


class SlotResizer:
    def __init__(
        self,
        *,
        sizer: SlotSizer | None,
        cluster: Cluster,
        mode: Mode,
        training: TrainingDriver,
        shifting: WorkerShifts,
        outbox: Outbox,
        log: RunLog,
        train: TrainConfig,
    ) -> None:
        """`sizer`: the training slot sized by measurement (`--train.resize-every`), None = fixed
        (then every method does nothing)."""
        self.sizer, self.cluster, self.mode = sizer, cluster, mode
        self.training, self.shifting, self.outbox, self.log = training, shifting, outbox, log
        self.budget_s = train.sizing_budget_s
        self.resize_to: int | None = None  # the training slot's next size, decided by the sizer
        self.resize_reserve = 0  # ... and rollout's reserved devices beside it (0: none)
        self.resize_step: int | None = None  # the step boundary whose checkpoint it waits for
        self.resize_checkpoint: str | None = None  # ... once committed
        self.resizes = 0

    @property
    def allocation(self) -> Allocation:
        """The training slot's devices and rollout's reserved ones, as the sizing names them."""
        return Allocation(self.cluster.train_devices, rollout_reserve(self.mode))

    # ---- what the run measures -----------------------------------------------------------------
    def start(self) -> None:
        """The run's first sizing: on the engines' profiles, training as the model says."""
        if self.sizer is not None:
            self.sizer.start(self.allocation)

    def trained(self, done: TrainedStep) -> None:
        """A training step measured; a sizing starts if one is due after it."""
        if self.sizer is None:
            return
        self.sizer.trained(done.devices, done.secs, int(done.metrics.get("tokens", 0.0)))
        if self.sizer.due(done.step):
            self.start_sizing()

    def shifted(self, msg: m.ShiftDone, devices: int, secs: float) -> None:
        """A shift of `devices` devices measured (`msg`: its slot's last ShiftDone)."""
        if self.sizer is not None:
            self.sizer.shifted(msg.role, msg.slot, msg.up, devices, secs)

    # ---- sizings ---------------------------------------------------------------------------------
    def poll(self) -> None:
        """A finished sizing: logged (every candidate's prediction), and its pick, if any, made
        the slot's next size."""
        done = self.sizer.poll() if self.sizer is not None else None
        if done is None:
            return
        assert self.sizer is not None
        sizing, pick = done
        self.log_sizing(sizing, pick)
        world, devices = self.cluster.world, self.cluster.train_devices
        if pick is not None and pick.train_devices != devices:
            # its split is of the devices the new slot leaves: it holds once the slot moves (on
            # this slot's, rollout's share may be all of them); until then, none is reserved
            reserve(self.mode, world, devices, 0)
            self.resize_to, self.resize_reserve = pick.train_devices, pick.rollout_devices
        elif self.resize_step is None:  # the newest sizing says stay: an earlier pick not begun
            self.resize_to = None
            if pick is not None:  # the same slot: its reserved split holds at once (no state moves)
                reserve(self.mode, world, devices, pick.rollout_devices)
        if self.sizer.owed:  # from the slot as it is now
            self.start_sizing()

    def start_sizing(self) -> None:
        """A sizing from the slot as it is now (owed if one runs), unless the last step has
        trained: nothing is left to size."""
        assert self.sizer is not None
        if not self.training.finished:
            self.sizer.start(self.allocation)

    def log_sizing(self, sizing: Sizing, pick: Allocation | None, ended: bool = False) -> None:
        """A finished sizing in the timeline: every candidate's prediction and the pick (`ended`:
        it landed after the run's last step, its pick not carried out but named as the flags
        that launch the next run there)."""
        print(f"pivot: {sizing.line()}", flush=True)
        advice = launch_flags(self.cluster.world, pick) if ended and pick is not None else ""
        self.log.shift(
            event="train_sizing",
            step=self.training.step,
            devices=sizing.current.train_devices,
            reserve=sizing.current.rollout_devices,
            predicted={label(p.alloc): round(p.throughput) for p in sizing.points},
            pick=label(pick) if pick is not None else None,
            cpu_s=round(sizing.cpu_s, 2),
            complete=sizing.complete,
            calibration=dataclasses.asdict(sizing.calibration),
            next_launch=advice,
        )

    def finish(self, failed: str | None) -> None:
        """The run has ended (`failed`: why, if it failed): the sizing in flight, awaited and
        logged unless the run failed (its pick is the next launch's advice): at most
        `--train.sizing-budget-s` of CPU, on rank 0 alone, the other ranks told to stop."""
        if self.sizer is None:
            return
        if failed is None and self.sizer.running:
            print(
                f"pivot: the run has ended; awaiting the training slot's sizing in flight (at "
                f"most {self.budget_s:g} CPU-s) for the next launch's advice",
                flush=True,
            )
            done = self.sizer.wait()
            if done is not None:
                self.log_sizing(*done, ended=True)
        self.sizer.close()

    # ---- the re-size, at a step boundary ---------------------------------------------------------
    def due(self) -> bool:
        """A decided re-size that may be carried out now or is being carried out: nothing
        trained in this attempt (GPS, or the checkpoint the launch resumed from, rebuilds the
        trainer anywhere), or the step boundary's checkpoint was asked for. Training waits."""
        trained = self.training.trained
        return self.resize_to is not None and (not trained or self.resize_step is not None)

    def at_boundary(self, step: int) -> bool:
        """Step `step` has trained: whether its checkpoint is the one a decided re-size moves the
        trainer's state through (it is asked for then)."""
        if self.resize_to is not None:
            self.resize_step = step
        return self.resize_step == step

    def saved(self, step: int, path: str) -> None:
        """Step `step`'s checkpoint was committed at `path`."""
        if step == self.resize_step:
            self.resize_checkpoint = path

    def maybe_resize(self) -> None:
        """Carry out a due re-size once nothing trains or saves (`Cluster.move_training_slot`:
        the trainer shifts down, the slot takes the last `resize_to` devices), then tell every
        rank; the planner brings the trainer up there like any shift up."""
        if not self.due() or self.training.in_flight or self.training.saving:
            return
        if self.resize_step is not None and self.resize_checkpoint is None:
            return  # its checkpoint is not committed yet
        assert self.resize_to is not None
        was, world = self.cluster.train_devices, self.cluster.world
        if not self.cluster.move_training_slot(self.resize_to, self.shifting.execute):
            return
        ranks = list(range(world - self.resize_to, world))
        reserve(self.mode, world, self.resize_to, self.resize_reserve)
        checkpoint = self.resize_checkpoint or ""
        self.outbox.to_all(m.ResizeTraining(ranks, checkpoint))
        self.resizes += 1
        step = self.training.step
        self.log.shift(
            event="train_resized", step=step, was=was, devices=len(ranks), checkpoint=checkpoint
        )
        print(
            f"pivot: training slot re-sized {was} -> {len(ranks)} devices after step {step}"
            + (f" (its state through {checkpoint})" if checkpoint else ""),
            flush=True,
        )
        self.resize_to = self.resize_step = self.resize_checkpoint = None
