"""Device time of each unit of work on the emulated cluster, from the simulator's own cost model
(pivot/sim/costs.py and hardware.py: the same per-role A, B, C, D, prefill, training and shift
costs), for the paper-scale models of `emulate.preset` on this job's devices.

The runtime moves real tokens, `length_scale` times fewer than the paper's: one real decode
step stands for `L = length_scale` paper decode steps, and a replica holding `tok` real KV
tokens holds `L * tok` paper ones. Its config is scaled once at start (`runtime_config`):
engine KV by 1/L, planner seconds by the time scale; `paper_config` undoes it, so the
simulator and the emulated runtime see one configuration. The prefill budget per step stays as
it is: each of the L paper steps a real step stands for may prefill a chunk of
`max_prefill_tokens` paper tokens, L chunks are that many real tokens (scaled by 1/L, a replica
that comes up with a full queue would admit about one judge per real step and take minutes of
emulated time to fill, where the simulator, like a serving engine, fills it in one prefill).
"""

from __future__ import annotations

import copy
import dataclasses
import math

from pivot.config import ConfigError, EngineConfig, PivotConfig
from pivot.sched.throughput import ThroughputModel
from pivot.sim.band import corner
from pivot.sim.costs import build_cluster
from pivot.sim.hardware import HARDWARE, HardwareProfile, decode_steps_s
from pivot.sim.kv_move import kv_move_s_per_token
from pivot.sim.workload import Workload

BLOCK_SIZE = 4
"""KV block of the emulated engines: real sequences are ~L times shorter than the paper's, so
a 16-token block would strand a large share of the scaled KV capacity."""


def _preset(cfg: PivotConfig) -> PivotConfig:
    from configs.presets import PRESETS, paper_preset

    name = cfg.emulate.preset
    if name not in PRESETS or PRESETS[name]().model.policy_params_b <= 0:
        paper = ", ".join(n for n, make in PRESETS.items() if make().model.policy_params_b > 0)
        raise ConfigError(
            f"emulate.preset={name!r}: not a paper preset with model sizes (known: {paper})"
        )
    return paper_preset(name)


def _scaled_engine(e: EngineConfig, factor: float) -> EngineConfig:
    return dataclasses.replace(
        e,
        backend="embedded",
        block_size=BLOCK_SIZE,
        kv_capacity_tokens=max(BLOCK_SIZE, int(e.kv_capacity_tokens * factor)),
    )


def _scaled_planner(cfg: PivotConfig, factor: float) -> PivotConfig:
    p = cfg.planner
    planner = dataclasses.replace(
        p,
        horizon_s=p.horizon_s * factor,
        tau_shift_s=p.tau_shift_s * factor,
        interval_s=p.interval_s * factor,
    )
    return cfg.replace(planner=planner)


def runtime_config(cfg: PivotConfig, workload: Workload | None = None) -> PivotConfig:
    """The configuration the emulated ranks run: the preset's engines with KV over L, caps on
    response lengths over L, planner seconds times the time scale."""
    preset, L, workload = _preset(cfg), cfg.emulate.length_scale, workload or Workload()
    rollout = dataclasses.replace(
        cfg.rollout,
        engine=_scaled_engine(preset.rollout.engine, 1 / L),
        max_new_tokens=math.ceil(workload.response.cap / L),
    )
    reward = dataclasses.replace(
        cfg.reward,
        engine=_scaled_engine(preset.reward.engine, 1 / L),
        max_new_tokens=math.ceil(workload.judge.cap / L),
    )
    # the horizon is the emulated workload's time scale (steps of minutes), not the starting
    # preset's (tiny-cpu plans over 10 s for its 5-second steps): the preset's, like the engines
    planner = dataclasses.replace(cfg.planner, horizon_s=preset.planner.horizon_s)
    return _scaled_planner(
        cfg.replace(rollout=rollout, reward=reward, planner=planner), cfg.emulate.time_scale
    )


def paper_config(cfg: PivotConfig, world: int, per_node: int) -> PivotConfig:
    """The paper-scale configuration a runtime config stands for (what the simulator runs)."""
    L = cfg.emulate.length_scale
    out = _scaled_planner(copy.deepcopy(cfg), 1 / cfg.emulate.time_scale)
    out.model = copy.deepcopy(_preset(cfg).model)
    out.rollout.engine = dataclasses.replace(
        out.rollout.engine, kv_capacity_tokens=out.rollout.engine.kv_capacity_tokens * L
    )
    out.reward.engine = dataclasses.replace(
        out.reward.engine, kv_capacity_tokens=out.reward.engine.kv_capacity_tokens * L
    )
    out.cluster = dataclasses.replace(
        out.cluster, nnodes=world // per_node, devices_per_node=per_node, device="cuda"
    )
    return out


def emulated_hardware(cfg: PivotConfig) -> HardwareProfile:
    """The profile the devices take: `--emulate.hardware` at `--emulate.corner`."""
    hw = HARDWARE[cfg.emulate.hardware]
    return hw if cfg.emulate.corner == "nominal" else corner(hw, cfg.emulate.corner)


class EmulatedCosts:
    """Emulated seconds of engine steps, training steps and shifts of this job's slots."""

    def __init__(self, cfg: PivotConfig, world: int, per_node: int) -> None:
        self.cfg, self.L, self.time_scale = cfg, cfg.emulate.length_scale, cfg.emulate.time_scale
        self.hw = emulated_hardware(cfg)
        table, self.costs = build_cluster(paper_config(cfg, world, per_node), self.hw)
        self.train_devices = len(table.replicas[table.train_rid].devices)

    def tp(self, role: str) -> int:
        return self.costs.roles[role].tp

    def engine_step_s(self, role: str, n_seq: int, kv_tokens: int, prefill_tokens: int) -> float:
        """One real engine step: `L` decode steps of `n_seq` sequences whose real KV held
        `kv_tokens` before the step, plus the prefill of `prefill_tokens` real tokens."""
        c = self.costs.roles[role]
        m = c.throughput
        decode = (
            decode_steps_s(m.A, m.B, m.C, m.D, n_seq, kv_tokens * self.L, self.L) if n_seq else 0.0
        )
        return decode + c.prefill_s_per_token * prefill_tokens * self.L

    def kv_transfer_s(self, role: str, tokens: int) -> float:
        """Moving a migrated sequence's KV of `tokens` real tokens: out of the source's devices
        into host memory and into the destination's, each device over its share of the host link."""
        c = self.costs.roles[role]
        return kv_move_s_per_token(c.model, c.tp) * tokens * self.L

    def train_step_s(self, tokens: int, devices: int) -> float:
        """A training step over `tokens` real tokens (prompt + response of every sample) on a
        training slot of `devices` (the job's sizing may have moved it since start)."""
        return self.costs.train_s(devices, tokens * self.L)

    def shift_s(self, role: str, up: bool, devices: int = 0) -> float:
        """A shift of `role`; the trainer's on a slot of `devices` (0: the start-up slot's)."""
        if role == "train" and devices and devices != self.train_devices:
            return self.costs.resized(devices).shift_s(role, up)
        return self.costs.shift_s(role, up)

    def runtime_profile(self, role: str) -> ThroughputModel:
        """The throughput model of a `role` replica in the runtime's units (real tokens, wall
        seconds), for the controller's schedulers and planner: a real step of n sequences over
        tok real KV tokens lasts time_scale * L * (A * L * tok + max(B, C * n) + D), and a real
        token's prefill time_scale * L of the paper's per-token prefill (`engine_step_s`)."""
        c, k = self.costs.roles[role], self.time_scale * self.L
        m = c.throughput
        return ThroughputModel(
            m.A * k * self.L, m.B * k, m.C * k, m.D * k, c.prefill_s_per_token * k
        )
