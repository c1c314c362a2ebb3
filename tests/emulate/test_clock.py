"""The emulated device's clock and costs: deadline arithmetic and time scale with a fake clock,
and that what a wrapped role waits is the hardware profile's prediction for the paper-scale
model (oracles written from the hardware numbers, step by step, not from the closed forms)."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from configs.presets import tiny_cpu
from pivot.emulate import EmulatedClock, EmulatedCosts, paper_config, runtime_config
from pivot.emulate.roles import EmulatedInference, EmulatedTrainer
from pivot.engine import EngineStats

# H20 (pivot/sim/hardware.py: bandwidth share, step overhead and prefill share fit to Qwen's SGLang
# benchmark) and Qwen2.5-7B (config.json: 28 layers, 4 KV heads, 128 dims)
HBM, FLOPS, MEM_EFF, DEC_EFF, PREFILL_EFF, MFU, STEP_OVERHEAD = (
    4.0e12,
    148e12,
    0.35,
    0.3,
    0.6,
    0.45,
    0.002,
)
P7B, KV7B = 7.6e9, 2 * 28 * 4 * 128 * 2


class FakeTime:
    def __init__(self, start: float = 10.0) -> None:
        self.t, self.slept = start, []

    def now(self) -> float:
        return self.t

    def sleep(self, s: float) -> None:
        self.slept.append(s)
        self.t += s


def test_waits_until_the_scaled_deadline_and_tallies() -> None:
    ft = FakeTime()
    clock = EmulatedClock(0.01, now=ft.now, sleep=ft.sleep)
    t0 = ft.now()
    ft.t += 0.005  # real compute
    assert clock.deadline(t0, 2.0) == pytest.approx(10.02)
    clock.wait("rollout", t0, 2.0, devices=4)
    assert ft.slept == [pytest.approx(0.015)] and ft.t == pytest.approx(10.02)
    t = clock.tally["rollout"]
    assert (t.count, t.emulated_s, t.device_s) == (1, 2.0, 8.0)
    assert (
        t.compute_s == pytest.approx(0.005)
        and t.waited_s == pytest.approx(0.015)
        and t.overrun_s == 0
    )


def test_compute_past_the_deadline_is_an_overrun_not_a_wait() -> None:
    ft = FakeTime()
    clock = EmulatedClock(0.001, now=ft.now, sleep=ft.sleep)
    t0 = ft.now()
    ft.t += 0.05
    assert clock.wait("train", t0, 20.0) == 0.0  # deadline t0 + 0.02
    assert ft.slept == [] and clock.tally["train"].overrun_s == pytest.approx(0.03)


def test_time_scale_must_be_positive() -> None:
    with pytest.raises(ValueError, match="time_scale=0"):
        EmulatedClock(0.0)


def emulated_cfg(length_scale: int = 100, time_scale: float = 0.01):
    cfg = tiny_cpu()
    cfg.cluster.device, cfg.emulate.length_scale, cfg.emulate.time_scale = (
        "emulated",
        length_scale,
        time_scale,
    )
    cfg.train.devices = 2
    return runtime_config(cfg)


def test_runtime_config_scales_engines_and_planner_and_paper_config_undoes_it() -> None:
    cfg = emulated_cfg()
    assert (
        cfg.rollout.engine.kv_capacity_tokens == 262144 // 100
        and cfg.rollout.engine.max_running_seqs == 256
    )
    assert (
        cfg.reward.engine.max_prefill_tokens == 16384
    )  # a real step is 100 paper steps of one chunk each
    assert (
        cfg.reward.engine.backend == "embedded" and cfg.rollout.max_new_tokens == 154
    )  # 15,360 / 100 up
    assert cfg.planner.horizon_s == pytest.approx(0.6) and cfg.planner.tau_shift_s == pytest.approx(
        0.03
    )
    paper = paper_config(cfg, 8, 8)
    assert (
        paper.planner.horizon_s == pytest.approx(60.0)
        and paper.rollout.engine.kv_capacity_tokens == 262100
    )
    assert paper.reward.engine.max_prefill_tokens == 16384
    assert paper.model.policy_params_b == 7.6 and paper.cluster.nnodes == 1


def test_engine_step_waits_the_profiles_decode_and_prefill_time() -> None:
    costs = EmulatedCosts(emulated_cfg(), 8, 8)
    n, kv, prefill, L = 3, 120, 40, 100
    a, b, c, d = (
        KV7B / (HBM * MEM_EFF),
        2 * P7B / (HBM * MEM_EFF),
        2 * P7B / (FLOPS * DEC_EFF),
        STEP_OVERHEAD,
    )
    decode = sum(
        a * (kv * L + n * i) + max(b, c * n) + d for i in range(L)
    )  # L decode steps, one by one
    prefill_s = 2 * P7B * prefill * L / (FLOPS * PREFILL_EFF)
    assert costs.engine_step_s("rollout", n, kv, prefill) == pytest.approx(
        decode + prefill_s, rel=1e-9
    )

    ft = FakeTime()
    clock = EmulatedClock(0.01, now=ft.now, sleep=ft.sleep)
    # two sequences of 40 tokens keep running (the engine's counters, as `stats()` reports them)
    counters = dict(n_seq=2, n_tok=80, n_running=2, running_tokens=80)
    counters |= dict(kv_free_tokens=0, kv_total_tokens=0, tokens_generated=0)
    counters |= dict(last_step_latency_s=0.0, weights_version=0)
    stats = EngineStats(**counters)
    engine = SimpleNamespace(stats=lambda: dataclasses.replace(stats))

    def step() -> list:  # 3 ms of compute; prefills 40 tokens; one sequence (41 tokens) finishes
        ft.t += 0.003
        stats.prefill_tokens += 40
        stats.prefix_hit_tokens += 8
        return [SimpleNamespace(prompt_ids=[0] * 10, output_ids=[0] * 31)]

    role = EmulatedInference(
        SimpleNamespace(engine=engine, role="rollout", step=step), costs, clock
    )
    t0 = ft.now()
    role.step()
    # sequences advanced: 2 running (40 tokens each) + 1 finished (41): n = 3, KV before the step = 121 - 3
    expected = costs.engine_step_s("rollout", 3, 118, 40)
    assert ft.t - t0 == pytest.approx(expected * 0.01) and ft.slept == [
        pytest.approx(expected * 0.01 - 0.003)
    ]
    assert (clock.tally["rollout"].prefill_tokens, clock.tally["rollout"].prefix_hit_tokens) == (
        40,
        8,
    )


@pytest.mark.parametrize(
    "which,mem_eff,dec_eff,prefill_eff,overhead",
    [("slow", 0.28, 0.2, 0.5, 0.005), ("fast", 0.60, 0.5, 0.7, 0.0007)],
)
def test_a_corner_runs_the_devices_at_that_end_of_the_ranges(
    which: str, mem_eff: float, dec_eff: float, prefill_eff: float, overhead: float
) -> None:
    """`--emulate.corner`: the same step priced with docs/simulator_cost_model.md's range ends."""
    cfg = emulated_cfg()
    cfg.emulate.corner = which
    costs = EmulatedCosts(cfg, 8, 8)
    n, kv, prefill, L = 3, 120, 40, 100
    a, b, c = KV7B / (HBM * mem_eff), 2 * P7B / (HBM * mem_eff), 2 * P7B / (FLOPS * dec_eff)
    decode = sum(a * (kv * L + n * i) + max(b, c * n) + overhead for i in range(L))
    prefill_s = 2 * P7B * prefill * L / (FLOPS * prefill_eff)
    assert costs.engine_step_s("rollout", n, kv, prefill) == pytest.approx(
        decode + prefill_s, rel=1e-9
    )


def test_training_and_shifts_wait_the_profiles_time() -> None:
    costs = EmulatedCosts(emulated_cfg(length_scale=50), 8, 8)
    ft = FakeTime()
    clock = EmulatedClock(0.02, now=ft.now, sleep=ft.sleep)
    batch = SimpleNamespace(
        prompt_ids=[[1] * 10, [1] * 12], response_ids=[[2] * 30, [2] * 8]
    )  # 60 real tokens
    trainer = EmulatedTrainer(
        SimpleNamespace(train_step=lambda b: {}, shift_up=lambda s: {}, shift_down=dict),
        costs,
        clock,
    )
    t0 = ft.now()
    trainer.train_step(batch)
    assert ft.t - t0 == pytest.approx(
        0.02 * (6 + 2) * P7B * 60 * 50 / (2 * FLOPS * MFU)
    )  # update + old-log-prob forward
    t0 = ft.now()
    phases = trainer.shift_up({})
    # 2 s fixed + 16 B/param of the 2 devices on one host at 22 GB/s, shared by both devices
    assert phases["emulated_s"] == pytest.approx(
        2.0 + 16 * P7B / 22e9
    ) and ft.t - t0 == pytest.approx(0.02 * phases["emulated_s"])
    rollout = EmulatedInference(
        SimpleNamespace(role="rollout", shift_down=lambda fence: ([], {"release": 0.0})),
        costs,
        clock,
    )
    _, phases = rollout.shift_down()
    assert phases["emulated_s"] == pytest.approx(
        0.5 + 2 * P7B / 1e9 * 0.02
    )  # discard: fixed + per-GB


def test_an_unknown_or_tiny_preset_is_named() -> None:
    cfg = tiny_cpu()
    for name in ("nope", "tiny-cpu"):
        cfg.emulate.preset = name
        with pytest.raises(ValueError, match=f"emulate.preset='{name}'"):
            runtime_config(cfg)
