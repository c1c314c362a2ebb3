"""Configuration sections of where roles run and how devices shift between them: the deployment
and its hosts (`ClusterConfig`), the shift planner (`PlannerConfig`) and emulated devices
(`EmulateConfig`). Part of the tree of `pivot.config`, which re-exports every name here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pivot.bad_input import check as _check

Mode = Literal["pivot", "colocated", "disaggregated", "rr_colocated"]
Strategy = Literal["pivot", "static", "rule_based", "chaos"]


@dataclass
class ClusterConfig:
    mode: Mode = "pivot"
    """Deployment: pivot (shiftable), colocated, disaggregated, or rr_colocated (rollout+reward share)."""
    nnodes: int = 0
    """Hosts in the job; 0 = from torchrun's environment."""
    devices_per_node: int = 0
    """Devices (ranks) per host; 0 = from torchrun's environment."""
    device: Literal["auto", "cpu", "cuda", "emulated"] = "auto"
    """Where roles run; auto = cuda when available (NCCL), else cpu (gloo). emulated: CPU ranks
    that run the real runtime and tiny models but take the device time a hardware profile
    predicts for the paper-scale models of --emulate.preset (pivot/emulate/, set by --emulate.*)."""
    gpu_memory_gb: float = 0.0
    """Memory per device in GB (simulator and fit checks); 0 = unknown."""
    host_memory_gb: float = 0.0
    """GPS budget per host in GB; 0 = unlimited (replicate every model on every host). The dry run
    also checks GPS plus the trainer's offloaded state against it."""
    network_gb_s: float = 25.0
    """Bandwidth between hosts that GPS's transfer planner assumes, GB/s (an RDMA NIC's, not
    measured here: docs/multinode.md); it only ranks the hosts a Read may use for what its own
    host lacks."""
    gps_local_first: bool = True
    """GPS Reads come from the reader's own host wherever it holds the slice (replication-first);
    False spreads them over every host's copy by estimated latency."""
    heartbeat_timeout_s: float = 10.0
    """A rank whose heartbeat (one a second, pivot/runtime/job/liveness.py) stops for this long is
    declared dead: the job ends with one line naming it, so torchrun restarts it; 0 = off."""

    def __post_init__(self) -> None:
        _check(self.gpu_memory_gb >= 0, "cluster.gpu_memory_gb", self.gpu_memory_gb, "must be >= 0")
        _check(self.network_gb_s > 0, "cluster.network_gb_s", self.network_gb_s, "must be > 0")
        _check(
            self.heartbeat_timeout_s == 0 or self.heartbeat_timeout_s >= 3,
            "cluster.heartbeat_timeout_s",
            self.heartbeat_timeout_s,
            "must be 0 (off) or >= 3 (heartbeats are a second apart)",
        )
        _check(
            self.host_memory_gb >= 0, "cluster.host_memory_gb", self.host_memory_gb, "must be >= 0"
        )
        _check(self.nnodes >= 0, "cluster.nnodes", self.nnodes, "must be >= 0")
        _check(
            self.devices_per_node >= 0,
            "cluster.devices_per_node",
            self.devices_per_node,
            "must be >= 0",
        )


@dataclass
class PlannerConfig:
    strategy: Strategy = "pivot"
    """Shift strategy in pivot mode: the five-step planner, static split, rule-based, or chaos (a
    random valid plan every planner tick, for soak tests: pivot/plan/chaos.py)."""
    horizon_s: float = 60.0
    """H in the benefit B = H * (T_cand - T_cur) - phi, in seconds."""
    tau_shift_s: float = 3.0
    """tau_shift in seconds until a shift bringing a role up has been timed; from then on the
    planner uses the mean measured duration of that role's shifts (pivot/shift/timing.py). A pair's
    penalty is sum (tau_shift + re-prefill time of the replica's KV) * T_i."""
    interval_s: float = 0.5
    """Least time between two planner runs."""
    throughput_model: bool = True
    """Rate replicas with the fitted throughput model; --planner.no-throughput-model is the ablation
    where a replica's throughput is 1 if it has work, else 0."""
    migration: bool = True
    """Migrate running sequences on a shift; --planner.no-migration is the ablation where a shift
    down waits for them and a shift up only drains the queue."""
    kv_migration: bool = False
    """Move an aborted or migrated sequence's KV cache (and linear-attention state) to the replica
    that resumes it, through host shared memory, instead of re-prefilling it (embedded engines;
    sglang replicas re-prefill; a replica that cannot take it re-prefills, counted). The planner
    then prices a shift's aborted sequences at the transfer, not the recompute
    (pivot/engine/kv_export.py, pivot/plan/pairs.py)."""
    kv_refill_share: float = 0.1
    """With kv_migration: what moving an aborted sequence's KV costs as a share of re-prefilling
    it, in a shift pair's penalty. 2 x KV bytes over a ~25 GB/s device-host copy against prefill
    at half of bf16 peak gives 0.02 (7B on H20) to 0.4 (1.5B on H200) (docs/kv_migration.md)."""
    rule_high: float = 0.8
    """Rule-based: shift up a role whose KV utilisation is above this."""
    rule_low: float = 0.1
    """Rule-based: shift down a role whose KV utilisation is below this."""
    max_evaluated: int = 0
    """Most candidates whose migration the planner simulates (step 4); 0: no cap, as the paper
    (every candidate within `budget_s`). Beyond a cap, a coarse-to-fine search over the replica
    count k (geometric spread, then bisection around the best benefit) approximates it."""
    budget_s: float = 0.25
    """Planning-time budget of step 4 in CPU seconds of the planner's thread (0: none). The
    planner simulates every candidate (exact, the paper's step 4) when the measured cost of the
    largest one, times their count, fits; otherwise as many as fit, chosen coarse-to-fine.
    Measured (`tools/bench_planner.py --budget`, docs/results.md): on 60 random 128-device
    snapshots it is exhaustive in all (14 ms CPU median, 49 max), where a cap of 8 chose another
    plan in 17 and lost up to 3.9% of the benefit; at 1024 and 4096 devices it scores 21 of 192
    and 4 of 768 candidates in 0.15-0.17 CPU s. The simulator plans without it (simulated
    time: its search must not depend on the speed of the machine running it)."""
    chaos_seed: int = 0
    """Seed of the chaos strategy's random plans."""
    reserve_rollout: int = 0
    """Devices outside the training slot that rollout keeps once it holds them: the pivot
    planner never shifts it below them (training's mandatory shift up excepted), so with both
    reserves set it runs a disaggregated split and lends only the idle trainer's devices. 0: no
    reserve (the paper's planner). `--train.devices auto` sets both where its search predicts
    the reserved split beats shifting freely (pivot/sim/autosize.py)."""
    reserve_reward: int = 0
    """The same for the reward role."""

    def __post_init__(self) -> None:
        _check(self.horizon_s > 0, "planner.horizon_s", self.horizon_s, "must be > 0")
        _check(
            self.max_evaluated == 0 or self.max_evaluated >= 2,
            "planner.max_evaluated",
            self.max_evaluated,
            "must be 0 (no cap) or >= 2",
        )
        _check(self.budget_s >= 0, "planner.budget_s", self.budget_s, "must be >= 0")
        _check(
            0 <= self.kv_refill_share <= 1,
            "planner.kv_refill_share",
            self.kv_refill_share,
            "must be in [0, 1]",
        )
        _check(self.interval_s >= 0, "planner.interval_s", self.interval_s, "must be >= 0")
        _check(self.tau_shift_s >= 0, "planner.tau_shift_s", self.tau_shift_s, "must be >= 0")
        for name in ("reserve_rollout", "reserve_reward"):
            _check(getattr(self, name) >= 0, f"planner.{name}", getattr(self, name), "must be >= 0")
        _check(
            0 <= self.rule_low < self.rule_high <= 1,
            "planner.rule_low",
            self.rule_low,
            "need 0 <= rule_low < rule_high <= 1",
        )


@dataclass
class EmulateConfig:
    """Emulated devices (`--cluster.device emulated`, pivot/emulate/); unused on real ones."""

    preset: str = "qwen2.5-7b+qwen3-30b-a3b"
    """The paper preset whose policy and GenRM sizes, engine KV and planner horizon the devices
    emulate."""
    hardware: Literal["h20", "h200"] = "h20"
    """The hardware profile of pivot/sim/hardware.py whose costs the devices take."""
    corner: Literal["nominal", "slow", "fast"] = "nominal"
    """That profile as it is, or at the slow or fast end of every cost-model parameter's range
    (pivot/sim/band.py): a figure measured at both ends carries the model's sensitivity band."""
    time_scale: float = 0.01
    """Wall seconds per emulated second (0.01: a 1,000 s run takes 10 s)."""
    length_scale: int = 100
    """Paper tokens per real token. Responses are drawn from the simulator's workload and divided
    by it; each real engine step stands for this many decode steps."""

    def __post_init__(self) -> None:
        _check(self.time_scale > 0, "emulate.time_scale", self.time_scale, "must be > 0")
        _check(self.length_scale >= 1, "emulate.length_scale", self.length_scale, "must be >= 1")


@dataclass
class RecoveryConfig:
    """What the job does when an inference engine fails inside a live rank (docs/reliability.md):
    the replica shifts down, its sequences continue elsewhere from the tokens they had, and its
    engine is rebuilt from GPS; the job never stops for it."""

    max_engine_failures: int = 3
    """A replica whose engine fails this many times within recovery.window_s stays down for the
    rest of the run (said once on stderr); the job goes on with the other replicas."""
    window_s: float = 600.0
    """The window, in seconds, over which a replica's engine failures are counted."""

    def __post_init__(self) -> None:
        _check(
            self.max_engine_failures >= 1,
            "recovery.max_engine_failures",
            self.max_engine_failures,
            "must be >= 1",
        )
        _check(self.window_s > 0, "recovery.window_s", self.window_s, "must be > 0")
