"""Sizing PivotRL's training slot from costs: the deployment search of pivot/sim/deploy.py over
the training slot, on the real planner and a cost model calibrated by what a run measured,
within a CPU-time budget, and the decision to re-size.

`--train.devices auto` (pivot/runtime/control/sizing.py) runs `size_slot` at start-up, with the
engines' start-up profiles, and again every `--train.resize-every` steps with the training time
measured so far; `decide` turns the candidates' predicted tokens/s into a re-size when the best
beats the current slot by more than `--train.resize-gain`. The simulator replays the same
policy (`SimOptions.resizes`, `replay`), so `tools/bench_sim.py --band` can judge it as a run lives it:
launched at the nominal slot, costs learnt after the first step.

The search is the one every baseline is tuned with (the same grid and edge steps), so a slot
it picks is comparable to theirs. Each candidate is a whole simulated run (seconds of CPU at 32
devices, a minute or more at 128: docs/results.md), so the budget is checked before each
candidate starts: the current slot is always scored first, then the grid, then the steps past
its edge, and a search out of budget decides among what it scored.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

from pivot.config import PivotConfig
from pivot.sched import Role, ThroughputModel
from pivot.sched.profile import CONSTANTS
from pivot.sim.costs import SimCosts, build_cluster
from pivot.sim.deploy import (
    Allocation,
    SearchPoint,
    beyond_edges,
    candidate_allocations,
    deployment,
    evaluate,
)
from pivot.sim.engine_profile import with_engine
from pivot.sim.hardware import HardwareProfile
from pivot.sim.options import Calibration, EngineCalibration, Resize, SimOptions
from pivot.sim.window import aligned_window
from pivot.sim.workload import Workload


@dataclass(frozen=True)
class CostModel:
    """A job as the simulator sees it: `paper` its config at the simulator's scale (models with
    their sizes, the cluster's shape), `hardware` its devices' profile; a runtime token stands
    for `token_scale` simulated ones and a simulated second lasts `time_scale` runtime seconds
    (emulated devices, pivot/emulate/costs.py; 1 and 1 on real ones)."""

    paper: PivotConfig
    hardware: HardwareProfile
    token_scale: float = 1.0
    time_scale: float = 1.0

    def options(self, calibration: Calibration) -> SimOptions:
        """The simulated run each candidate is scored on: the job's batch, the steady-state window
        the figures are measured on (pivot/sim/window.py), the costs calibrated."""
        t = self.paper.train
        w = aligned_window(t.staleness)
        return SimOptions(
            hardware=self.hardware,
            workload=Workload(prompts_per_step=t.batch_prompts, group_size=t.group_size),
            steps=w.steps,
            warmup_steps=w.warmup,
            calibration=calibration,
        )

    def simulated(self, m: ThroughputModel) -> ThroughputModel:
        """A runtime throughput model (runtime tokens and seconds) in the simulator's units: a
        runtime step over tok tokens lasts time_scale * token_scale simulated steps over
        token_scale * tok tokens (pivot/emulate/costs.py `runtime_profile`, inverted)."""
        k = self.time_scale * self.token_scale
        return ThroughputModel(m.A / (k * self.token_scale), m.B / k, m.C / k, m.D / k)


@dataclass(frozen=True)
class Sizing:
    """A search's outcome: every slot scored (tokens/s predicted), the best, its CPU time."""

    current: int
    points: tuple[SearchPoint, ...]
    cpu_s: float
    complete: bool
    """False: the budget ran out before every candidate was scored."""
    calibration: Calibration = Calibration()
    """The measured over modelled costs it searched on."""

    @property
    def best(self) -> SearchPoint:
        return max(self.points, key=lambda p: p.throughput)

    def predicted(self, devices: int) -> float:
        """Tokens/s predicted for a slot of `devices` (0.0 when it was not scored or cannot run)."""
        return next((p.throughput for p in self.points if p.alloc.train_devices == devices), 0.0)

    def line(self) -> str:
        """One line for the run's log: every candidate's prediction, the pick, the time taken."""
        tried = ", ".join(
            f"T{p.alloc.train_devices}:{p.throughput:,.0f}" + (" (cannot run)" if p.error else "")
            for p in sorted(self.points, key=lambda p: p.alloc.train_devices)
        )
        cut = "" if self.complete else ", budget spent before the search ended"
        pick = self.best.alloc.train_devices
        return f"training slot sizing: {tried} tokens/s predicted -> T{pick} ({self.cpu_s:.1f} CPU-s{cut})"


def size_slot(
    base: PivotConfig, opts: SimOptions, budget_s: float, seeds: tuple[int, ...] | None = None
) -> Sizing:
    """Score PivotRL's training slots on `opts` (its hardware and calibration: the costs a run
    measured) from `base.train.pool`, the current slot, until the search ends or `budget_s`
    of this process's CPU time is spent (checked before each candidate)."""
    t0 = time.process_time()
    current = Allocation(base.train.pool)
    points = [evaluate(base, "pivot", current, opts, seeds)]

    def within() -> bool:
        return time.process_time() - t0 < budget_s

    todo = [a for a in candidate_allocations(base, "pivot") if a != current]
    while todo and within():
        points.append(evaluate(base, "pivot", todo.pop(0), opts, seeds))
        if not todo:  # the grid is scored: step past its edge while the best sits on it
            best = max(points, key=lambda p: p.throughput)
            todo = beyond_edges(base, "pivot", best.alloc, [p.alloc for p in points])
    cpu_s = time.process_time() - t0
    return Sizing(base.train.pool, tuple(points), cpu_s, not todo, opts.calibration)


def decide(sizing: Sizing, min_gain: float) -> int | None:
    """The slot to re-size to: the best scored, when it predicts more than (1 + `min_gain`) times
    the current slot's tokens/s (a re-size costs a checkpoint and a shift; noise in the
    measured costs must not make the slot oscillate); None to stay."""
    best = sizing.best
    if best.alloc.train_devices == sizing.current or best.throughput <= 0:
        return None
    here = sizing.predicted(sizing.current)
    return best.alloc.train_devices if best.throughput > (1 + min_gain) * here else None


def engine_calibration(measured: ThroughputModel, modelled: ThroughputModel) -> EngineCalibration:
    """What a start-up profile (`measured`, in the cost model's units) says of an engine whose
    cost model is `modelled`: each decode constant as measured. One scale for the whole step
    would be right at one batch and context only: on 32B H200's slow corner the search then
    mispredicted slots by 7-11% and kept one 12% short of the best (docs/results.md). Prefill,
    which the profile does not time, stays the model's: its efficiency's plausible range is
    narrower than decode's and apart from it (pivot/sim/band.py), so the decode step's ratio
    would carry decode's error into it."""
    a, b, c, d = (
        getattr(measured, k) / getattr(modelled, k) if getattr(modelled, k) > 0 else 1.0
        for k in CONSTANTS
    )
    return EngineCalibration((a, b, c, d))


def modelled_costs(base: PivotConfig, opts: SimOptions) -> SimCosts:
    """The costs the cost model gives `base`'s roles on `opts`' hardware (uncalibrated)."""
    return build_cluster(base, with_engine(opts.hardware, opts.engine), opts.kv_from_engine)[1]


def shift_ratio(said: SimCosts, real: SimCosts, role: str) -> float:
    """Measured over modelled seconds of `role`'s shifts, one up and one down: a run's shifts of
    a role are pairs (what goes up comes down)."""
    both = (True, False)
    return sum(real.shift_s(role, up) for up in both) / sum(said.shift_s(role, up) for up in both)


def measured(startup: Calibration, said: SimCosts, real: SimCosts, devices: int) -> Calibration:
    """What a run knows after its first step on a slot of `devices` where the model says `said`
    and the devices cost `real`: the start-up profiles, a training step and the shifts made
    (pivot/runtime/control/sizing.py measures the same)."""
    said, real = said.resized(devices), real.resized(devices)
    tokens = 1_000_000
    trained = dataclasses.replace(
        startup, train=real.train_s(devices, tokens) / said.train_s(devices, tokens)
    )
    return trained.with_shifts({role: shift_ratio(said, real, role) for role in Role})


def replay(
    base: PivotConfig,
    believed: SimOptions,
    actual: SimOptions,
    min_gain: float,
    budget_s: float = float("inf"),
    seeds: tuple[int, ...] | None = None,
) -> tuple[tuple[Resize, ...], list[Sizing]]:
    """The decisions `--train.devices auto` makes in a run launched with PivotRL's training slot
    at `base.train.pool`, whose cost model says `believed` and whose devices cost `actual`:
    at start-up it measures the engines (a profile: each decode constant calibrated, prefill
    left the model's), after step 1 also a training step and the shifts made (training and
    shifts calibrated); each search starts from the slot the last one left and takes its CPU time
    as delay. Later sizings see the same costs and change nothing."""
    said, real = modelled_costs(base, believed), modelled_costs(base, actual)
    engine = {
        role: engine_calibration(real.roles[role].throughput, said.roles[role].throughput)
        for role in (Role.ROLLOUT, Role.REWARD)
    }
    startup = Calibration(engine[Role.ROLLOUT], engine[Role.REWARD])
    resizes, sizings, current = [], [], base.train.pool
    for after_step in (0, 1):
        calibration = startup if after_step == 0 else measured(startup, said, real, current)
        cfg = deployment(base, "pivot", Allocation(current))
        sizing = size_slot(
            cfg, dataclasses.replace(believed, calibration=calibration), budget_s, seeds
        )
        sizings.append(sizing)
        pick = decide(sizing, min_gain)
        if pick is not None:
            resizes.append(Resize(after_step, pick, sizing.cpu_s))
            current = pick
    return tuple(resizes), sizings
