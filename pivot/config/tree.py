"""The root of the config tree (`PivotConfig`): the run's own fields, one field per section, and
the checks that need more than one section or the job's size (`validate`, `check_shape`). The
sections are the modules beside it; `pivot.config` re-exports them all.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

from pivot.bad_input import check as _check
from pivot.config.cluster import ClusterConfig, EmulateConfig, PlannerConfig, RecoveryConfig
from pivot.config.output import CheckpointConfig, LogConfig
from pivot.config.roles import ModelConfig, RewardConfig, RolloutConfig
from pivot.config.tools import ToolsConfig
from pivot.config.train import DataConfig, EvalConfig, TrainConfig
from pivot.engine.capabilities import capabilities
from pivot.engine.config import FLASH_BLOCK_MULTIPLE

AUTO_SHARE = 0.25
"""Where `--train.devices auto` starts without a share: a quarter of the world, one of the
slots the sizing's search scores first (pivot/sim/deploy.py `candidate_allocations`)."""


@dataclass
class PivotConfig:
    preset: str = "tiny-cpu"
    """The preset these values started from (set with --preset before other flags)."""
    seed: int = 0
    """Seed of data order, sampling and initialisation."""
    dry_run: bool = False
    """Print the memory plan (per role and device, per host) against cluster.gpu_memory_gb and
    cluster.host_memory_gb, then exit (2 if something does not fit). No torchrun, no GPU: the
    cluster is cluster.nnodes x cluster.devices_per_node."""
    print_config: bool = False
    """Print the resolved config (preset or --config file, then the flags) as YAML, a file
    --config FILE takes, and exit."""
    model: ModelConfig = field(default_factory=ModelConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    tools: ToolsConfig = field(default_factory=ToolsConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    planner: PlannerConfig = field(default_factory=PlannerConfig)
    data: DataConfig = field(default_factory=DataConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    emulate: EmulateConfig = field(default_factory=EmulateConfig)
    recovery: RecoveryConfig = field(default_factory=RecoveryConfig)
    log: LogConfig = field(default_factory=LogConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)

    def __post_init__(self) -> None:
        served = [
            f"{r.role} served by {r.engine.backend}"
            for r in self.inference_roles()
            if not capabilities(r.engine.backend).returns_whole_weights
        ]
        _check(
            not (self.log.verify_weights and served),
            "log.verify_weights",
            self.log.verify_weights,
            f"{' and '.join(served)}, which cannot hand back whole weights to checksum",
        )
        for r in self.inference_roles():
            size = r.engine.kv_block_size(self.model.attention)
            _check(
                r.engine.paged_kernel(self.model.attention) != "flash"
                or size % FLASH_BLOCK_MULTIPLE == 0,
                f"{r.role}.engine.block_size",
                size,
                f"flash attention's paged KV needs a multiple of {FLASH_BLOCK_MULTIPLE} (or 0 for the default)",
            )

    def longest_response(self) -> tuple[int, str]:
        """The most tokens after a rollout's prompt, and the flag that bounds them: a multi-turn
        episode's turns and tool responses (`tools.max_episode_tokens`), else one answer's."""
        if self.tools.enabled:
            return self.tools.max_episode_tokens, "tools.max_episode_tokens"
        return self.rollout.max_new_tokens, "rollout.max_new_tokens"

    def inference_roles(self) -> tuple[RolloutConfig, RewardConfig]:
        """The sections of the two inference roles, rollout first, for the checks that are alike
        for both (each names its own flags through its `role`)."""
        return self.rollout, self.reward

    def validate(self, world_size: int, local_world_size: int) -> None:
        """Every section's checks, then whole-tree checks against the job's size (torchrun's
        WORLD_SIZE and LOCAL_WORLD_SIZE)."""
        for section in (
            self.model,
            self.rollout,
            self.rollout.engine,
            self.reward,
            self.reward.engine,
            self.tools,
            self.train,
            self.planner,
            self.data,
            self.eval,
            self.cluster,
            self.emulate,
            self.checkpoint,
            self,
        ):
            section.__post_init__()
        c = self.cluster
        _check(
            world_size % local_world_size == 0,
            "cluster.devices_per_node",
            local_world_size,
            f"does not divide world size {world_size}",
        )
        if c.devices_per_node:
            _check(
                c.devices_per_node == local_world_size,
                "cluster.devices_per_node",
                c.devices_per_node,
                f"but torchrun started {local_world_size} per node",
            )
        if c.nnodes:
            _check(
                c.nnodes * local_world_size == world_size,
                "cluster.nnodes",
                c.nnodes,
                f"but torchrun started {world_size // local_world_size} nodes",
            )
        self.check_shape(world_size, local_world_size)

    def fit_world(self, world_size: int) -> PivotConfig:
        """This config on `world_size` devices: a training pool given as a share of the world
        (train.devices 0, train.devices_share > 0) becomes a device count, a multiple of both
        inference roles' TP so the devices beside it still tile into whole replicas; auto
        becomes that start (`AUTO_SHARE` of the world without a share) with the run's sizing
        on. Any other config is returned as it is."""
        t = self.train
        unit = math.lcm(self.rollout.tp, self.reward.tp)
        if t.devices == "auto":  # a start the run's sizing moves (train.resize_every)
            devices = int((t.devices_share or AUTO_SHARE) * world_size) // unit * unit
            return self.replace(
                train=dataclasses.replace(
                    t, devices=max(unit, devices), resize_every=t.resize_every or 5
                )
            )
        if t.devices or not t.devices_share:
            return self
        devices = max(unit, int(t.devices_share * world_size) // unit * unit)
        return self.replace(train=dataclasses.replace(t, devices=devices))

    def room_problem(self, world_size: int) -> str | None:
        """Why `world_size` devices cannot hold the training pool beside one replica of each
        inference role (what a shiftable or disaggregated job needs to run a step), or None."""
        if self.cluster.mode == "colocated":
            return None
        need = self.train.pool + self.rollout.tp + self.reward.tp
        if world_size >= need:
            return None
        return (
            f"cluster: {world_size} devices, but the training pool ({self.train.devices}) beside one "
            f"rollout replica (TP {self.rollout.tp}) and one reward replica (TP {self.reward.tp}) "
            f"needs {need}"
        )

    def check_shape(self, world_size: int, devices_per_node: int) -> None:
        """Role sizes against a cluster of `world_size` devices, `devices_per_node` per host."""
        for r in self.inference_roles():
            # a replica either fits inside a host or spans whole hosts
            fits = (
                devices_per_node % r.tp == 0
                if r.tp <= devices_per_node
                else r.tp % devices_per_node == 0
            )
            _check(
                fits, f"{r.role}.tp", r.tp, f"does not divide {devices_per_node} devices per node"
            )
            _check(
                r.tp <= world_size,
                f"{r.role}.tp",
                r.tp,
                f"larger than the world ({world_size} devices)",
            )
        _check(
            self.train.pool <= world_size,
            "train.devices",
            self.train.devices,
            f"training pool larger than the world ({world_size} devices)",
        )
        if self.cluster.mode == "disaggregated":
            used = (
                self.train.pool
                + self.rollout.replicas * self.rollout.tp
                + self.reward.replicas * self.reward.tp
            )
            _check(
                used <= world_size,
                "rollout.replicas",
                self.rollout.replicas,
                f"pools need {used} devices, world has {world_size}",
            )
        if self.cluster.mode in ("disaggregated", "pivot"):
            for r in self.inference_roles():
                _check(
                    r.replicas >= 1,
                    f"{r.role}.replicas",
                    r.replicas,
                    f"mode {self.cluster.mode} needs at least one",
                )
        if self.cluster.mode == "pivot":
            self._check_reserves(world_size)
        _check(
            self.planner.strategy == "pivot" or self.cluster.mode == "pivot",
            "planner.strategy",
            self.planner.strategy,
            f"picks shifts in cluster.mode pivot only, not {self.cluster.mode}",
        )

    def _check_reserves(self, world_size: int) -> None:
        """The planner's reserves fit beside the training pool; with the slot's sizing on they
        are a split of every inference device or none, the only reserves its search scores
        (pivot/sim/autosize.py): it would otherwise predict another planner than the one run."""
        p, inference = self.planner, world_size - self.train.pool
        reserved = p.reserve_rollout + p.reserve_reward
        _check(
            reserved <= inference,
            "planner.reserve_rollout",
            p.reserve_rollout,
            f"with planner.reserve_reward={p.reserve_reward}: more than the {inference} devices "
            "beside the training pool",
        )
        if self.train.resize_every and reserved:
            _check(
                p.reserve_rollout > 0 and reserved == inference,
                "planner.reserve_rollout",
                p.reserve_rollout,
                f"with planner.reserve_reward={p.reserve_reward} and the slot's sizing on "
                f"(train.resize_every): the two must split all {inference} devices beside the "
                "training pool, or be 0",
            )

    def replace(self, **sections: Any) -> PivotConfig:
        return dataclasses.replace(self, **sections)
