"""`SimOptions`: how a simulated run is driven (hardware, workload, planner cadence, KV sizing)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pivot.sim.hardware import H20, HardwareProfile
from pivot.sim.workload import Workload


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
    record_plans: bool = False
    """Keep every (snapshot, plan) the planner saw (tests compare with a fresh planner)."""
    max_sim_s: float = 1e7

    def __post_init__(self) -> None:
        if self.warmup_steps < 0 or (self.steps is not None and self.warmup_steps >= self.steps):
            raise ValueError(
                f"SimOptions.warmup_steps={self.warmup_steps}: need 0 <= it < steps={self.steps}"
            )
