"""Small simulated clusters: one 8-device host (two for scaling checks), few short sequences."""

from __future__ import annotations

import pytest

from configs.presets import paper_preset
from pivot.config import PivotConfig
from pivot.sim import LengthDist, SimOptions, Workload

SMALL_WORKLOAD = Workload(
    prompt=LengthDist(100, 0.3, 512),
    response=LengthDist(300, 1.0, 3000),
    judge=LengthDist(200, 1.0, 3000),
    prompts_per_step=4,
    group_size=4,
)


def small_cfg(nnodes: int = 1, train_devices: int = 2) -> PivotConfig:
    cfg = paper_preset("qwen2.5-1.5b+glm-z1-9b")
    cfg.cluster.nnodes = nnodes
    cfg.train.devices = train_devices
    return cfg


@pytest.fixture
def opts() -> SimOptions:
    return SimOptions(workload=SMALL_WORKLOAD, steps=3, plan_every_s=2.0)
