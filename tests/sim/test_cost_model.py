"""The calibrated cost model: its fit reproduces the public measurements it cites, training
prices its forward passes, colocated pays the weight push, and the band's corners bracket it."""

from __future__ import annotations

import dataclasses

import pytest

from pivot.sim import H20, H200, HardwareProfile
from pivot.sim.band import RANGES, check_nominal_inside, corner
from pivot.sim.calibration import (
    QWEN3_DENSE_PARAMS_B,
    QWEN3_SGLANG_H20,
    Measured,
    fit_decode,
    fit_prefill_eff,
    predicted_speed,
)
from pivot.sim.costs import build_cluster
from pivot.sim.deploy import deployment
from pivot.sim.hardware import model_spec, train_s
from tests.sim.conftest import small_cfg

# QwenLM/Qwen3 docs/source/getting_started/speed_benchmark.md, SGLang, H20, batch 1, input 1 token
PUBLISHED_TOK_S = {
    "Qwen3-8B": 81.73,
    "Qwen3-14B": 47.10,
    "Qwen3-32B": 20.72,
    "Qwen3-30B-A3B": 137.18,
}


def test_h20_decode_constants_are_the_fit_of_qwens_sglang_benchmark() -> None:
    mem_eff, step_s = fit_decode()
    assert H20.mem_eff == pytest.approx(mem_eff, abs=0.005)
    assert H20.step_overhead_s == pytest.approx(step_s, abs=0.0001)
    assert H20.prefill_eff == pytest.approx(fit_prefill_eff(mem_eff), abs=0.03)


@pytest.mark.parametrize("m", QWEN3_SGLANG_H20, ids=lambda m: m.model)
def test_the_h20_profile_reproduces_the_published_batch1_speeds(m: Measured) -> None:
    # oracle: the published tokens/s; the MoE's routing overheads put it 16% off the dense fit
    tol = 0.2 if "A3B" in m.model else 0.06
    got = predicted_speed(m, 1, H20.mem_eff, H20.step_overhead_s, H20.prefill_eff, 0.0)
    assert got == pytest.approx(PUBLISHED_TOK_S[m.model], rel=tol)
    if m.model in QWEN3_DENSE_PARAMS_B:  # and the longer inputs, whose prefill the fit prices
        params = QWEN3_DENSE_PARAMS_B[m.model]
        for prompt in (6144, 14336):
            assert predicted_speed(
                m, prompt, H20.mem_eff, H20.step_overhead_s, H20.prefill_eff, params
            ) == pytest.approx(m.speed[prompt], rel=0.06)


def test_training_prices_the_update_and_its_forward_passes() -> None:
    m = model_spec("/models/Qwen2.5-7B", 7.6)
    # by hand: (6N update + 2N old-log-prob forward) * tokens / (devices * peak * MFU)
    assert train_s(m, H20, 8, 1000) == pytest.approx(8 * 7.6e9 * 1000 / (8 * 148e12 * 0.45))
    assert train_s(m, H20, 8, 1000, forwards=2) == pytest.approx(
        10 * 7.6e9 * 1000 / (8 * 148e12 * 0.45)
    )
    cfg = small_cfg()
    assert build_cluster(cfg, H20)[1].train_forwards == 1
    cfg.train.kl_coef = 0.01
    assert build_cluster(cfg, H20)[1].train_forwards == 2  # the reference forward too


def test_colocated_rollout_phase_pays_the_weight_push_into_the_engine() -> None:
    colo = build_cluster(deployment(small_cfg(), "colocated"), H20)[1]
    piv = build_cluster(deployment(small_cfg(), "pivot"), H20)[1]
    # the preset's Qwen2.5-1.5B: 1.5e9 params, 2 B each, at 3.8 GB/s, after the fixed 1 s
    assert colo.roles["rollout"].up_s == pytest.approx(1.0 + 2 * 1.5e9 / 3.8e9)
    assert (
        colo.roles["reward"].up_s == piv.roles["reward"].up_s
    )  # the GenRM reloads from host memory
    assert piv.roles["rollout"].up_s < colo.roles["rollout"].up_s


@pytest.mark.parametrize("hw", [H20, H200], ids=lambda h: h.name)
def test_band_corners_bracket_the_nominal_profile(hw: HardwareProfile) -> None:
    check_nominal_inside(hw)
    slow, fast = corner(hw, "slow"), corner(hw, "fast")
    assert slow.mem_eff == RANGES["mem_eff"].low and fast.mem_eff == RANGES["mem_eff"].high
    assert slow.step_overhead_s == RANGES["step_overhead_s"].high and fast.weight_sync_gb_s == 61.0
    cfg = small_cfg()
    speeds = [
        build_cluster(cfg, h)[1].roles["reward"].throughput.throughput(32, 32 * 2000)
        for h in (slow, hw, fast)
    ]
    assert speeds[0] < speeds[1] < speeds[2]
    with pytest.raises(ValueError, match="mem_eff=0.9"):
        check_nominal_inside(dataclasses.replace(hw, mem_eff=0.9))
