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
    rollout_split,
    world_of,
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
        token_scale * tok tokens, and a runtime token's prefill time_scale * token_scale
        simulated tokens' (pivot/emulate/costs.py `runtime_profile`, inverted)."""
        k = self.time_scale * self.token_scale
        return ThroughputModel(
            m.A / (k * self.token_scale), m.B / k, m.C / k, m.D / k, m.prefill_s_per_token / k
        )


def label(alloc: Allocation) -> str:
    """`T16`, or `T16/R16` with a reserved split (16 devices kept by rollout, the rest by reward)."""
    return f"T{alloc.train_devices}" + (
        f"/R{alloc.rollout_devices}" if alloc.rollout_devices else ""
    )


@dataclass(frozen=True)
class Sizing:
    """A search's outcome: every allocation scored (tokens/s predicted), the best, its CPU time."""

    current: Allocation
    """The training slot (and reserved split, if any) the run has now."""
    points: tuple[SearchPoint, ...]
    cpu_s: float
    complete: bool
    """False: the budget ran out before every candidate was scored."""
    calibration: Calibration = Calibration()
    """The measured over modelled costs it searched on."""

    @property
    def best(self) -> SearchPoint:
        return max(self.points, key=lambda p: p.throughput)

    def predicted(self, alloc: Allocation) -> float:
        """Tokens/s predicted for `alloc` (0.0 when it was not scored or cannot run)."""
        return next((p.throughput for p in self.points if p.alloc == alloc), 0.0)

    def line(self) -> str:
        """One line for the run's log: every candidate's prediction, the pick, the time taken."""
        tried = ", ".join(
            f"{label(p.alloc)}:{p.throughput:,.0f}" + (" (cannot run)" if p.error else "")
            for p in sorted(
                self.points, key=lambda p: (p.alloc.train_devices, p.alloc.rollout_devices)
            )
        )
        cut = "" if self.complete else ", budget spent before the search ended"
        pick = label(self.best.alloc)
        return f"training slot sizing: {tried} tokens/s predicted -> {pick} ({self.cpu_s:.1f} CPU-s{cut})"


def size_slot(
    base: PivotConfig, opts: SimOptions, budget_s: float, seeds: tuple[int, ...] | None = None
) -> Sizing:
    """Score PivotRL's training slots on `opts` (its hardware and calibration: the costs a run
    measured) from `base`'s, the current one, until the search ends or `budget_s` of this
    process's CPU time is spent (checked before each candidate). Once the slots are scored,
    each is scored again, best first, with the split its run held pinned as reserves
    (`held_split`: the planner then keeps each inference role those devices and lends only the
    idle trainer's): where training bounds the run, a static split loses nothing to the churn
    that shifting freely costs the batch training waits for (32B on H200 at its fast corner,
    docs/results.md)."""
    t0 = time.process_time()
    # its reserves split every inference device or are none (PivotConfig._check_reserves)
    current = Allocation(base.train.pool, base.planner.reserve_rollout)
    points = [evaluate(base, "pivot", current, opts, seeds)]

    def within() -> bool:
        return time.process_time() - t0 < budget_s

    def best() -> Allocation:
        return max(points, key=lambda p: p.throughput).alloc

    todo = [a for a in candidate_allocations(base, "pivot") if a != current]
    pinned = False  # the slots' held splits are queued
    while todo and within():
        points.append(evaluate(base, "pivot", todo.pop(0), opts, seeds))
        tried = [p.alloc for p in points]
        if not todo:  # the grid is scored: step past its edge while the best sits on it
            todo = [a for a in beyond_edges(base, "pivot", best(), tried) if a not in tried]
        if not todo and not pinned:
            pinned = True
            free = sorted(
                (p for p in points if not p.alloc.rollout_devices), key=lambda p: -p.throughput
            )
            held = (held_split(base, p) for p in free)
            todo = list(dict.fromkeys(a for a in held if a is not None and a not in tried))
    cpu_s = time.process_time() - t0
    return Sizing(current, tuple(points), cpu_s, not todo, opts.calibration)


def held_split(base: PivotConfig, point: SearchPoint) -> Allocation | None:
    """`point`'s slot with the split of inference devices its runs held (rollout's share of the
    devices up for rollout and reward, averaged over each run's measured window), in whole
    replicas; None without runs or where the split would leave a role nothing."""
    shares = []
    for run in point.runs.values():
        held = [p.devices for p in run.timeline if p.t >= run.window_start_s]
        ro, rw = (sum(d.get(role, 0) for d in held) for role in (Role.ROLLOUT, Role.REWARD))
        if ro + rw > 0:
            shares.append(ro / (ro + rw))
    train = point.alloc.train_devices
    if not shares:
        return None
    ro = rollout_split(base, train, sum(shares) / len(shares))
    return Allocation(train, ro) if 0 < ro < world_of(base) - train else None


def decide(sizing: Sizing, min_gain: float) -> Allocation | None:
    """The allocation to move to: the best scored, when it predicts more than (1 + `min_gain`)
    times the current one's tokens/s (a re-size costs a checkpoint and a shift; noise in the
    measured costs must not make the slot oscillate); None to stay."""
    best = sizing.best
    if best.alloc == sizing.current or best.throughput <= 0:
        return None
    here = sizing.predicted(sizing.current)
    return best.alloc if best.throughput > (1 + min_gain) * here else None


def engine_calibration(measured: ThroughputModel, modelled: ThroughputModel) -> EngineCalibration:
    """What a start-up profile (`measured`, in the cost model's units) says of an engine whose
    cost model is `modelled` (its `RoleCosts.profile`): each decode constant as measured, and
    prefill as timed. One scale for the whole step would be right at
    one batch and context only: on 32B H200's slow corner the search then mispredicted slots by
    7-11% and kept one 12% short of the best (docs/results.md). Prefill has a scale of its own
    (its efficiency's plausible range is apart from decode's, pivot/sim/band.py); a profile
    that did not time it (`prefill_s_per_token` 0: one written before it did) leaves it the
    model's."""
    a, b, c, d = (
        getattr(measured, k) / getattr(modelled, k) if getattr(modelled, k) > 0 else 1.0
        for k in CONSTANTS
    )
    timed = measured.prefill_s_per_token
    return EngineCalibration(
        (a, b, c, d), timed / modelled.prefill_s_per_token if timed > 0 else 1.0
    )


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
    at start-up it measures the engines (a profile: each decode constant and prefill
    calibrated), after step 1 also a training step and the shifts made (training and
    shifts calibrated); each search starts from the slot the last one left and takes its CPU time
    as delay. Later sizings see the same costs and change nothing."""
    said, real = modelled_costs(base, believed), modelled_costs(base, actual)
    engine = {
        role: engine_calibration(real.roles[role].profile, said.roles[role].profile)
        for role in (Role.ROLLOUT, Role.REWARD)
    }
    startup = Calibration(engine[Role.ROLLOUT], engine[Role.REWARD])
    resizes, sizings = [], []
    current = Allocation(base.train.pool)
    for after_step in (0, 1):
        calibration = (
            startup if after_step == 0 else measured(startup, said, real, current.train_devices)
        )
        cfg = deployment(base, "pivot", current)
        sizing = size_slot(
            cfg, dataclasses.replace(believed, calibration=calibration), budget_s, seeds
        )
        sizings.append(sizing)
        pick = decide(sizing, min_gain)
        if pick is not None:
            resizes.append(
                Resize(after_step, pick.train_devices, sizing.cpu_s, pick.rollout_devices)
            )
            current = pick
    return tuple(resizes), sizings
