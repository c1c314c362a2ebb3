"""`SimOptions`: how a simulated run is driven (hardware, workload, planner cadence, KV sizing, a
calibration by measured costs, a re-size of the training slot)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from pivot.sim.hardware import H20, HardwareProfile
from pivot.sim.workload import Workload


@dataclass(frozen=True)
class EngineCalibration:
    """Measured over modelled costs of one inference role's engine: each constant of its decode
    step (A, B, C, D of pivot/sched/throughput.py, which a start-up profile fits), its prefill
    and its shifts (up and down alike). 1.0 is the cost model as it is."""

    decode: tuple[float, float, float, float] = (1.0, 1.0, 1.0, 1.0)
    """A, B, C, D's scales; 0 drops a term (a profile whose fit has none)."""
    prefill: float = 1.0
    shift: float = 1.0

    def __post_init__(self) -> None:
        if len(self.decode) != 4 or not all(0 <= k < float("inf") for k in self.decode):
            raise ValueError(f"EngineCalibration.decode={self.decode!r}: need 4 finite scales >= 0")
        for name in ("prefill", "shift"):
            if not 0 < getattr(self, name) < float("inf"):
                raise ValueError(f"EngineCalibration.{name}={getattr(self, name)!r}: must be > 0")


@dataclass(frozen=True)
class Calibration:
    """Measured over modelled costs of each kind of work (pivot/sim/autosize.py measures them in
    a run): each inference role's engine, training steps (1.3 makes every step 30% longer) and
    the trainer's shifts."""

    rollout: EngineCalibration = EngineCalibration()
    reward: EngineCalibration = EngineCalibration()
    train: float = 1.0
    train_shift: float = 1.0

    def __post_init__(self) -> None:
        for name in ("train", "train_shift"):
            if not 0 < getattr(self, name) < float("inf"):
                raise ValueError(f"Calibration.{name}={getattr(self, name)!r}: must be > 0")

    def shift(self, role: str) -> float:
        """The scale of `role`'s shifts."""
        return self.train_shift if role == "train" else self.engine(role).shift

    def engine(self, role: str) -> EngineCalibration:
        """The calibration of inference `role`'s engine."""
        if role not in ("rollout", "reward"):
            raise ValueError(f"Calibration.engine({role!r}): expected rollout or reward")
        return self.rollout if role == "rollout" else self.reward

    def with_shifts(self, scales: Mapping[str, float]) -> Calibration:
        """These scales with each role of `scales` shifting that many times as long."""
        out = self
        for role, k in scales.items():
            if role == "train":
                out = dataclasses.replace(out, train_shift=k)
                continue
            engine = dataclasses.replace(out.engine(role), shift=k)
            if role == "rollout":
                out = dataclasses.replace(out, rollout=engine)
            else:
                out = dataclasses.replace(out, reward=engine)
        return out


@dataclass(frozen=True)
class Resize:
    """A sizing decision (pivot/sim/autosize.py) as a run makes it: its search starts once step
    `after_step` has trained (0: at start-up, on the engines' profiles), takes `delay_s`, and
    picks `train_devices`. It is carried out as the runtime carries it out: before the first
    step trains, at the first moment no shift is in flight (the trainer holds nothing a GPS
    Read cannot rebuild); after, at the first step boundary once decided (the trainer's state
    goes through a checkpoint). The trainer shifts down if it is up, the slot takes the pool of
    its new size, and its next shift up lands there. The planner's reserved split
    (`rollout_reserve` devices kept by rollout, the rest of the inference devices by reward; 0:
    none) holds from the moment the decision arrives: it moves no state."""

    after_step: int
    train_devices: int
    delay_s: float = 0.0
    rollout_reserve: int = 0


@dataclass(frozen=True)
class SimOptions:
    hardware: HardwareProfile = H20
    engine: str = "sglang"
    """Whose decode step the replicas run at (pivot/sim/engine_profile.py): `sglang` (the
    hardware profile's fitted constants) or `embedded-eager` (Pivot's engine as measured)."""
    workload: Workload = field(default_factory=Workload)
    steps: int | None = None
    """RL steps to run; None = cfg.train.steps."""
    plan_every_s: float = 5.0
    """Planner tick (simulated seconds); it also runs right after shifts and training steps."""
    plan_during_training: bool = True
    """Let the planner run while a training step runs (its plans may not shift training down),
    as the paper's planner and the runtime controller do; False is the ablation that does not
    plan while training, which leaves rollout without devices across back-to-back steps.
    While training, the snapshot says `train_batch_ready=True`: that is how the planner's pairs
    lock the trainer (otherwise its best plans all shift the running trainer down and are dropped)."""
    kv_from_engine: bool = True
    """A replica's KV holds `engine.kv_capacity_tokens` (the runtime's engine and scheduler
    capacity, bounded by the device memory); False: all the memory its weights leave."""
    kv_headroom: float = 0.1
    """Share of a replica's KV kept free when it admits a sequence, for the running ones to grow
    into (a serving engine reserves decode room at admission); without it a full replica
    preempts and re-prefills on nearly every step."""
    warmup_steps: int = 0
    """Steps left out of the throughput: with w > 0 the run measures the steady state, tokens of
    steps w.. over the time from the end of step w-1 to the end of the last step, and prompts
    keep being released past the last step within the staleness bound, as in a long run (the
    last steps' inference and training overlap their successors' instead of draining alone).
    0: the whole run, start-up and drain included."""
    calibration: Calibration = field(default_factory=Calibration)
    """The cost model scaled by what a run measured (the runtime's sizing search); default as is."""
    resizes: tuple[Resize, ...] = ()
    """Re-size the training slot during the run (PivotRL's `--train.devices auto`)."""
    record_plans: bool = False
    """Keep every (snapshot, plan) the planner saw (tests compare with a fresh planner)."""
    max_sim_s: float = 1e7

    def __post_init__(self) -> None:
        if self.warmup_steps < 0 or (self.steps is not None and self.warmup_steps >= self.steps):
            raise ValueError(
                f"SimOptions.warmup_steps={self.warmup_steps}: need 0 <= it < steps={self.steps}"
            )
