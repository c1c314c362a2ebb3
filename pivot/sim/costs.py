"""The simulated cluster: its replica table (pivot/shift/, tiled by pivot/dist.py as the runtime
tiles it) and the costs the hardware model derives for each role: decode throughput model, KV
capacity, prefill time, shift up and down times (colocated: the rollout phase's up is the
trainer's weight push into the engines, `hardware.weight_sync_s`), training's forward passes,
each scaled by a `Calibration` (what a run measured over what the model predicts; 1.0 = as is).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from pivot.config import ConfigError, PivotConfig
from pivot.dist import ClusterSpec, SlotTable
from pivot.sched import Role, ThroughputModel
from pivot.shift import ReplicaTable
from pivot.sim import hardware as hwm
from pivot.sim.hardware import HardwareProfile, ModelSpec, SimConfigError
from pivot.sim.options import Calibration, EngineCalibration


@dataclass(frozen=True)
class RoleCosts:
    model: ModelSpec
    tp: int
    throughput: ThroughputModel
    kv_capacity: int
    prefill_s_per_token: float
    up_s: float
    down_s: float
    max_running: int = 1 << 30
    """The engine's `max_running_seqs`: the largest batch a replica decodes."""

    @property
    def profile(self) -> ThroughputModel:
        """What a start-up profile of a replica measures: the decode constants and prefill."""
        return dataclasses.replace(self.throughput, prefill_s_per_token=self.prefill_s_per_token)


@dataclass(frozen=True)
class SimCosts:
    roles: dict[str, RoleCosts]
    """Costs of each inference role."""
    policy: ModelSpec
    hardware: HardwareProfile
    train_devices: int
    """Devices of the training slot (every device when colocated)."""
    train_forwards: int = 1
    """Forward-only passes of a training step besides the update: old log-probs (+ reference)."""
    calibration: Calibration = Calibration()
    """Measured over modelled seconds of training and of each role's shifts (the inference
    roles' decode and prefill are scaled in `roles` already)."""

    def train_s(self, devices: int, tokens: int) -> float:
        """A training step over `tokens` on a training slot of `devices`."""
        m, hw = self.policy, self.hardware
        return hwm.train_s(m, hw, devices, tokens, self.train_forwards) * self.calibration.train

    def resized(self, devices: int) -> SimCosts:
        """These costs with the training slot on `devices` (its shifts move a share of the state
        that depends on the slot's size); raises `SimConfigError` when the state does not fit."""
        hwm.check_train_fits(self.policy, self.hardware, devices)
        return dataclasses.replace(self, train_devices=devices)

    def shift_s(self, role: str, up: bool) -> float:
        if role == Role.TRAIN:
            modelled = hwm.train_shift_s(self.policy, self.hardware, self.train_devices, up)
        else:
            modelled = self.roles[role].up_s if up else self.roles[role].down_s
        return modelled * self.calibration.shift(role)


def _role_costs(
    spec: ModelSpec,
    hw: HardwareProfile,
    tp: int,
    field: str,
    kv_limit: int | None,
    max_running: int,
    cal: EngineCalibration,
) -> RoleCosts:
    a, b, c, d = (
        k * s for k, s in zip(hwm.decode_constants(spec, hw, tp), cal.decode, strict=True)
    )
    kv = hwm.kv_capacity_tokens(spec, hw, tp, field)
    return RoleCosts(
        spec,
        tp,
        ThroughputModel(a, b, c, d),
        kv if kv_limit is None else min(kv, kv_limit),
        hwm.prefill_s(spec, hw, tp, 1) * cal.prefill,
        hwm.inference_shift_s(spec, hw, tp, True),
        hwm.inference_shift_s(spec, hw, tp, False),
        max_running,
    )


def build_cluster(
    cfg: PivotConfig,
    hw: HardwareProfile,
    kv_from_engine: bool = True,
    calibration: Calibration | None = None,
) -> tuple[ReplicaTable, SimCosts]:
    """Replica table and costs for `cfg` on `hw`; raises `SimConfigError`/`ConfigError` naming the field.
    A replica's KV capacity is its engine's `kv_capacity_tokens` (what the runtime gives both the
    engine and the scheduler) where the device memory holds it; `kv_from_engine=False` gives it
    all the memory its weights leave, as a serving engine sized by memory fraction would."""
    calibration = calibration or Calibration()
    per_node = cfg.cluster.devices_per_node or hw.devices_per_node
    nnodes = cfg.cluster.nnodes
    if nnodes <= 0:
        raise SimConfigError(f"cluster.nnodes={nnodes!r}: the simulator needs the cluster size")
    world = nnodes * per_node
    try:
        cfg.check_shape(world, per_node)
    except ConfigError as e:
        raise SimConfigError(str(e)) from None
    if cfg.train.pool <= 0 and cfg.cluster.mode != "colocated":
        raise SimConfigError(
            f"train.devices={cfg.train.pool!r}: mode {cfg.cluster.mode} needs a training pool"
        )
    m = cfg.model
    policy = hwm.model_spec(m.policy, m.policy_params_b)
    genrm = hwm.model_spec(m.genrm, m.genrm_params_b, m.genrm_active_params_b)
    costs: dict[str, RoleCosts] = {
        Role.ROLLOUT: _role_costs(
            policy,
            hw,
            cfg.rollout.tp,
            "rollout.tp",
            cfg.rollout.engine.kv_capacity_tokens if kv_from_engine else None,
            cfg.rollout.engine.max_running_seqs,
            calibration.rollout,
        ),
        Role.REWARD: _role_costs(
            genrm,
            hw,
            cfg.reward.tp,
            "reward.tp",
            cfg.reward.engine.kv_capacity_tokens if kv_from_engine else None,
            cfg.reward.engine.max_running_seqs,
            calibration.reward,
        ),
    }
    train_devices = world if cfg.cluster.mode == "colocated" else cfg.train.pool
    hwm.check_train_fits(policy, hw, train_devices)
    if cfg.cluster.mode == "colocated":  # the trainer pushes the new policy into the engines
        costs[Role.ROLLOUT] = dataclasses.replace(
            costs[Role.ROLLOUT], up_s=hwm.weight_sync_s(policy, hw)
        )
    slots = SlotTable.build(
        ClusterSpec(world, 0, per_node), cfg.rollout.tp, cfg.reward.tp, train_devices
    )
    table = ReplicaTable.build(
        slots,
        world,
        {r: c.kv_capacity for r, c in costs.items()},
        {r: c.throughput for r, c in costs.items()},
    )
    return table, SimCosts(
        costs, policy, hw, train_devices, 1 + (cfg.train.kl_coef > 0), calibration
    )
