"""The training slot sized by measurement in a run (`--train.devices auto`, `--train.resize-every`).

Rank 0's controller asks `SlotSizer` for a sizing at start-up (the engines' profiles measured,
training as the cost model says), after step 1 (a training step measured) and every
`resize_every` steps after; each runs the simulator's deployment search over PivotRL's training
slot (pivot/sim/autosize.py) on the costs measured so far, in a process of its own (a search is
seconds to minutes of CPU: the controller's thread must keep its 200 ms pace), within
`--train.sizing-budget-s` of CPU. A pick that beats the current slot by `--train.resize-gain`
is handed to the controller, whose `SlotResizer` moves the slot at a step boundary
(pivot/runtime/control/slot_resizer.py). One runs at a time: one due meanwhile
starts when it lands; none starts once the last step has trained, and the run's end awaits
the one in flight, so every sizing started is logged (its pick, if the run ended first, is
the summary's advice for the next launch).

What is measured, in the simulator's units (`CostModel.simulated`): each inference role's
throughput profile against the cost model's, constant by constant, and its prefill (a profile
the run could not measure, or one written before profiles timed prefill, counts as the
model's); the training steps taken on the current slot against the cost model's step on that
many devices; each role's shifts against the cost model's shifts of that role (a slot's first
shift up on its devices builds its engine or trainer, which later shifts do not: it is not
counted).
"""

from __future__ import annotations

import dataclasses
import multiprocessing
from concurrent.futures import Future, ProcessPoolExecutor

from pivot.config import PivotConfig, TrainConfig
from pivot.plan.modes import split_reserves
from pivot.sched.throughput import ThroughputModel
from pivot.sim.autosize import (
    CostModel,
    Sizing,
    decide,
    engine_calibration,
    modelled_costs,
    size_slot,
)
from pivot.sim.deploy import Allocation, deployment
from pivot.sim.hardware import HARDWARE
from pivot.sim.options import Calibration, EngineCalibration


def _search(
    model: CostModel, current: Allocation, calibration: Calibration, budget_s: float
) -> Sizing:
    """One sizing, in the sizer's process; the candidates' runs are left there (only their
    predictions come back)."""
    cfg = deployment(model.paper, "pivot", current)
    sizing = size_slot(cfg, model.options(calibration), budget_s)
    points = tuple(dataclasses.replace(p, runs={}) for p in sizing.points)
    return dataclasses.replace(sizing, points=points)


class SlotSizer:
    def __init__(
        self, model: CostModel, train: TrainConfig, profiles: dict[str, ThroughputModel]
    ) -> None:
        """`profiles`: each inference role's throughput model as the run measured it (runtime
        units); a role without one is taken as the cost model says."""
        self.model, self.every = model, train.resize_every
        self.gain, self.budget_s = train.resize_gain, train.sizing_budget_s
        self.said = modelled_costs(model.paper, model.options(Calibration()))
        engines = {
            role: engine_calibration(model.simulated(m), self.said.roles[role].profile)
            for role, m in profiles.items()
            if role in self.said.roles
        }
        self.startup = Calibration(
            engines.get("rollout", EngineCalibration()), engines.get("reward", EngineCalibration())
        )
        self.steps: list[tuple[int, float]] = []  # (slot size, measured over modelled) per step
        self.shifts: dict[str, tuple[float, float]] = {}  # role -> (measured, modelled) seconds
        self.placed: set[tuple[str, int, int]] = set()  # (role, slot, devices) shifted up before
        self._pool: ProcessPoolExecutor | None = None
        self._running: Future | None = None
        self.searches = 0
        self.owed = False  # one came due while another ran: it starts when that one lands

    def due(self, step: int) -> bool:
        """Whether a sizing is due once step `step` has trained (1, then every `every`)."""
        return step == 1 or (step > 1 and (step - 1) % self.every == 0)

    def trained(self, devices: int, runtime_s: float, runtime_tokens: int) -> None:
        """A training step of `runtime_tokens` took `runtime_s` on a slot of `devices`."""
        modelled = self.said.train_s(devices, int(runtime_tokens * self.model.token_scale))
        if modelled > 0:
            self.steps.append((devices, runtime_s / self.model.time_scale / modelled))

    def shifted(self, role: str, slot: int, up: bool, devices: int, runtime_s: float) -> None:
        """A shift of `role`'s `slot` on `devices` devices (`up` or down) took `runtime_s`; a
        slot's first shift up on that many devices is not counted (it builds what later shifts
        reuse)."""
        if up and (role, slot, devices) not in self.placed:
            self.placed.add((role, slot, devices))
            return
        said = self.said.resized(devices) if role == "train" else self.said
        measured, modelled = self.shifts.get(role, (0.0, 0.0))
        self.shifts[role] = (
            measured + runtime_s / self.model.time_scale,
            modelled + said.shift_s(role, up),
        )

    def calibration(self, devices: int) -> Calibration:
        """The start-up ratios, training's (the mean over the steps on a slot of `devices`, the
        newest slot's; 1.0 before any step) and each role's shifts' (all its counted shifts,
        measured over modelled seconds; 1.0 before any)."""
        ratios = [r for d, r in self.steps if d == devices] or [r for _, r in self.steps]
        train = sum(ratios) / len(ratios) if ratios else 1.0
        shifts = {
            role: real_s / model_s
            for role, (real_s, model_s) in self.shifts.items()
            if real_s > 0 and model_s > 0
        }
        return dataclasses.replace(self.startup, train=train).with_shifts(shifts)

    def start(self, current: Allocation) -> None:
        """Start a sizing from `current` (the slot's devices, the reserved split if any); if
        one is running, it is owed: the controller starts it when that one lands (skipped, the
        sizing after step 1, the first to see training measured, would wait `every` steps)."""
        if self._running is not None:
            self.owed = True
            return
        self.owed = False
        if self._pool is None:  # spawn: rank 0 holds threads and a process group, never fork it
            self._pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
        calibration = self.calibration(current.train_devices)
        self._running = self._pool.submit(_search, self.model, current, calibration, self.budget_s)
        self.searches += 1

    @property
    def running(self) -> bool:
        return self._running is not None

    def poll(self) -> tuple[Sizing, Allocation | None] | None:
        """The sizing that finished since the last call, with the allocation to move to (None:
        stay); None while one runs or none was started. A failed search raises."""
        if self._running is None or not self._running.done():
            return None
        return self.wait()

    def wait(self) -> tuple[Sizing, Allocation | None] | None:
        """The sizing in flight, awaited (at most its CPU budget), with its pick as `poll`
        hands it; None if none runs."""
        if self._running is None:
            return None
        sizing, self._running = self._running.result(), None
        return sizing, decide(sizing, self.gain)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)


def launch_flags(world: int, pick: Allocation) -> str:
    """The flags that launch a run of `world` devices on a sizing's pick: its slot, and its
    reserved split if any (the planner's reserves, `split_reserves`)."""
    rollout, reward = split_reserves(world, pick.train_devices, pick.rollout_devices)
    reserves = f" --planner.reserve-rollout {rollout} --planner.reserve-reward {reward}"
    return f"--train.devices {pick.train_devices}" + (reserves if rollout else "")


def gpu_cost_model(cfg: PivotConfig, world: int, per_node: int, device: str) -> CostModel | str:
    """The job on this machine's GPUs as the simulator sees it, or why it has no cost model (a
    device the simulator has no profile of, models whose sizes the config does not give)."""
    if not device.startswith("cuda"):
        return f"the simulator has no cost model of device {device}"
    import torch

    name = torch.cuda.get_device_name()
    known = [k for k in HARDWARE if k.upper() in name.upper().split()]
    if not known:
        return (
            f"the simulator has no profile of {name} (pivot/sim/hardware.py: {', '.join(HARDWARE)})"
        )
    m = cfg.model
    if m.policy_params_b <= 0 or m.genrm_params_b <= 0:
        return "the models' sizes are not given (--model.policy-params-b, --model.genrm-params-b)"
    cluster = dataclasses.replace(cfg.cluster, nnodes=world // per_node, devices_per_node=per_node)
    return CostModel(cfg.replace(cluster=cluster), HARDWARE[known[0]])
