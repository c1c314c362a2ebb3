"""The simulated cluster: replica slots of every role with their derived costs.

Slots are laid out as the runtime lays them out (pivot/dist.py): rollout and reward slots tile
the whole cluster host by host with their TP size, the training slot is the last
`train.devices` devices. Slot ids: rollout 0..R-1, reward R..R+M-1, training R+M.
"""
from __future__ import annotations

from dataclasses import dataclass

from pivot.config import ConfigError, PivotConfig
from pivot.sched import Replica, Role, ThroughputModel
from pivot.sim import hardware as hwm
from pivot.sim.hardware import HardwareProfile, ModelSpec, SimConfigError


@dataclass(frozen=True)
class RoleCosts:
    model: ModelSpec
    tp: int
    throughput: ThroughputModel
    kv_capacity: int
    prefill_s_per_token: float
    up_s: float
    down_s: float


@dataclass(frozen=True)
class SimLayout:
    world: int
    replicas: tuple[Replica, ...]
    train_rid: int
    costs: dict[str, RoleCosts]
    policy: ModelSpec
    train_up_s: float
    train_down_s: float

    def role_of(self, rid: int) -> str:
        return str(self.replicas[rid].role)

    def slots(self, role: str) -> list[Replica]:
        return [r for r in self.replicas if r.role == role]


def _tile(tp: int, world: int, per_node: int) -> list[tuple[int, ...]]:
    if tp <= per_node:
        starts = [h * per_node + k * tp for h in range(world // per_node) for k in range(per_node // tp)]
    else:
        starts = list(range(0, world - tp + 1, tp))
    return [tuple(range(s, s + tp)) for s in starts]


def _role_costs(spec: ModelSpec, hw: HardwareProfile, tp: int, field: str, kv_limit: int | None) -> RoleCosts:
    a, b, c, d = hwm.decode_constants(spec, hw, tp)
    kv = hwm.kv_capacity_tokens(spec, hw, tp, field)
    return RoleCosts(
        spec, tp, ThroughputModel(a, b, c, d), kv if kv_limit is None else min(kv, kv_limit),
        hwm.prefill_s(spec, hw, tp, 1), hwm.inference_shift_s(spec, hw, tp, True), hwm.inference_shift_s(spec, hw, tp, False),
    )


def build_layout(cfg: PivotConfig, hw: HardwareProfile, kv_from_engine: bool = True) -> SimLayout:
    """Slots and costs for `cfg` on `hw`; raises `SimConfigError`/`ConfigError` naming the field.
    A replica's KV capacity is its engine's `kv_capacity_tokens` (what the runtime gives both the
    engine and the scheduler) where the device memory holds it; `kv_from_engine=False` gives it
    all the memory its weights leave, as a serving engine sized by memory fraction would."""
    per_node = cfg.cluster.devices_per_node or hw.devices_per_node
    nnodes = cfg.cluster.nnodes
    if nnodes <= 0:
        raise SimConfigError(f"cluster.nnodes={nnodes!r}: the simulator needs the cluster size")
    world = nnodes * per_node
    try:
        cfg.check_shape(world, per_node)
    except ConfigError as e:
        raise SimConfigError(str(e)) from None
    if cfg.train.devices <= 0 and cfg.cluster.mode != "colocated":
        raise SimConfigError(f"train.devices={cfg.train.devices!r}: mode {cfg.cluster.mode} needs a training pool")
    m = cfg.model
    policy = hwm.model_spec(m.policy, m.policy_params_b)
    genrm = hwm.model_spec(m.genrm, m.genrm_params_b, m.genrm_active_params_b)
    costs = {
        Role.ROLLOUT: _role_costs(policy, hw, cfg.rollout.tp, "rollout.tp",
                                  cfg.rollout.engine.kv_capacity_tokens if kv_from_engine else None),
        Role.REWARD: _role_costs(genrm, hw, cfg.reward.tp, "reward.tp",
                                 cfg.reward.engine.kv_capacity_tokens if kv_from_engine else None),
    }
    train_devices = world if cfg.cluster.mode == "colocated" else cfg.train.devices
    hwm.check_train_fits(policy, hw, train_devices)
    reps: list[Replica] = []
    for role in (Role.ROLLOUT, Role.REWARD):
        c = costs[role]
        for devs in _tile(c.tp, world, per_node):
            reps.append(Replica(len(reps), role, devs, c.kv_capacity, c.throughput))
    train_rid = len(reps)
    reps.append(Replica(train_rid, Role.TRAIN, tuple(range(world - train_devices, world))))
    return SimLayout(
        world, tuple(reps), train_rid, costs, policy,
        hwm.train_shift_s(policy, hw, train_devices, True), hwm.train_shift_s(policy, hw, train_devices, False),
    )
