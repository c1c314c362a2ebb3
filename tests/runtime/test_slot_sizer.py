"""The runtime's side of the training slot's sizing (pivot/runtime/control/sizing.py): what it
measures (profiles, training steps, shifts) becomes the cost model's calibration, when a sizing
starts, where a cost model exists (emulated devices, GPUs the simulator has a profile of, models
of known size) and the one line it says where none does."""

from __future__ import annotations

import dataclasses
import time

import pytest
import torch

from configs.presets import paper_preset
from pivot.dist import ClusterSpec
from pivot.emulate.backend import EmulatedDevices
from pivot.emulate.costs import EmulatedCosts
from pivot.runtime.control.sizing import SlotSizer, gpu_cost_model
from pivot.runtime.job.controller_thread import slot_sizer
from pivot.sched.throughput import ThroughputModel
from pivot.sim.autosize import CostModel
from pivot.sim.deploy import Allocation
from pivot.sim.hardware import H200
from pivot.sim.options import EngineCalibration
from tests.emulate.test_clock import emulated_cfg

PRESET = "qwen2.5-7b+qwen3-30b-a3b"


def _emulated() -> tuple[CostModel, EmulatedCosts]:
    cfg = emulated_cfg(length_scale=50)  # the runtime's config (scaled)
    model = EmulatedDevices().cost_model(cfg, ClusterSpec(8, 0, 8))
    return model, EmulatedCosts(cfg, 8, 8)


def _slower(m: ThroughputModel, k: float) -> ThroughputModel:
    return ThroughputModel(m.A * k, m.B * k, m.C * k, m.D * k)


def test_profiles_become_the_cost_models_calibration() -> None:
    model, costs = _emulated()
    exact = {role: costs.runtime_profile(role) for role in ("rollout", "reward")}
    train = dataclasses.replace(model.paper.train, resize_every=3)
    same = SlotSizer(model, train, exact)  # emulated profiles are the cost model's own
    for engine in (same.startup.rollout, same.startup.reward):
        assert engine.decode == pytest.approx((1.0,) * 4)
        assert engine.prefill == pytest.approx(1.0)  # timed, in the runtime's units
    slow = SlotSizer(model, train, {"rollout": _slower(exact["rollout"], 2.0)})
    assert slow.startup.rollout.decode == pytest.approx((2.0,) * 4)
    assert slow.startup.rollout.prefill == 1.0  # a profile that did not time it: the model's
    m = exact["rollout"]
    timed = dataclasses.replace(m, prefill_s_per_token=1.5 * m.prefill_s_per_token)
    assert SlotSizer(model, train, {"rollout": timed}).startup.rollout.prefill == pytest.approx(1.5)
    assert slow.startup.reward == EngineCalibration()  # not profiled: the model's
    m = exact["reward"]  # each constant as measured: a step slower where it is memory-bound
    shape = SlotSizer(model, train, {"reward": ThroughputModel(3 * m.A, 3 * m.B, m.C, m.D)})
    assert shape.startup.reward.decode == pytest.approx((3.0, 3.0, 1.0, 1.0))


def test_training_steps_become_trainings_calibration() -> None:
    model, costs = _emulated()
    sizer = SlotSizer(model, dataclasses.replace(model.paper.train, resize_every=3), {})
    assert sizer.calibration(2).train == 1.0  # nothing measured yet: the model's
    tokens = 600  # runtime tokens; the emulation's device time of them, 1.5x as long
    sizer.trained(2, 1.5 * costs.train_step_s(tokens, 2) * model.time_scale, tokens)
    assert sizer.calibration(2).train == pytest.approx(1.5)
    sizer.trained(4, 2.5 * costs.train_step_s(tokens, 4) * model.time_scale, tokens)
    assert sizer.calibration(4).train == pytest.approx(2.5)  # the slot's own steps first
    assert sizer.calibration(2).train == pytest.approx(1.5)
    assert [s for s in range(1, 12) if sizer.due(s)] == [1, 4, 7, 10]


def test_shifts_become_the_shifts_calibration() -> None:
    model, costs = _emulated()
    sizer = SlotSizer(model, dataclasses.replace(model.paper.train, resize_every=3), {})
    runtime_s = model.time_scale  # one simulated second of the runtime's
    sizer.shifted("rollout", 0, True, 1, 9 * runtime_s)  # its first shift up builds the engine
    assert sizer.calibration(2).rollout.shift == 1.0
    down, up = (costs.shift_s("rollout", u) for u in (False, True))
    sizer.shifted("rollout", 0, False, 1, 2 * down * runtime_s)
    sizer.shifted("rollout", 0, True, 1, 2 * up * runtime_s)  # the same slot again: counted
    assert sizer.calibration(2).rollout.shift == pytest.approx(2.0)
    sizer.shifted("train", 0, True, 4, 1.0)  # the trainer's first shift up on 4 devices
    sizer.shifted("train", 0, False, 4, 3 * costs.shift_s("train", False, 4) * runtime_s)
    calibration = sizer.calibration(4)
    assert calibration.train_shift == pytest.approx(3.0)  # priced at the slot's own size
    assert calibration.reward.shift == 1.0 and calibration.rollout.shift == pytest.approx(2.0)


@pytest.mark.slow
def test_a_sizing_runs_in_its_own_process_and_decides() -> None:
    model, costs = _emulated()
    train = dataclasses.replace(model.paper.train, resize_every=1, resize_gain=0.0)
    sizer = SlotSizer(model, train, {r: costs.runtime_profile(r) for r in ("rollout", "reward")})
    try:
        sizer.start(Allocation(model.paper.train.pool))
        assert sizer.poll() is None or True  # running, or already done on a fast machine
        deadline = time.monotonic() + 120
        while (done := sizer.poll()) is None:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        sizing, pick = done
        assert sizing.current == Allocation(model.paper.train.pool) and sizing.complete
        assert all(not p.runs for p in sizing.points)  # only the predictions came back
        assert pick in (None, sizing.best.alloc)
        assert sizer.poll() is None  # handed over once
    finally:
        sizer.close()


def test_gpu_cost_models_where_the_simulator_has_one(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = paper_preset(PRESET)
    assert "device cpu" in str(gpu_cost_model(cfg, 16, 8, "cpu"))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    model = gpu_cost_model(cfg, 16, 8, "cuda")
    assert isinstance(model, CostModel) and model.hardware == H200
    assert model.paper.cluster.nnodes == 2 and model.paper.cluster.devices_per_node == 8
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H100 80GB HBM3")
    assert "no profile of NVIDIA H100" in str(gpu_cost_model(cfg, 16, 8, "cuda"))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "NVIDIA H20")
    tiny = paper_preset("tiny-cpu")
    assert "sizes are not given" in str(gpu_cost_model(tiny, 16, 8, "cuda"))


def test_without_a_cost_model_the_slot_stays_said_once(capsys: pytest.CaptureFixture) -> None:
    cfg = paper_preset(PRESET)
    assert cfg.train.resize_every == 5  # the preset's auto
    assert slot_sizer(cfg, ClusterSpec(32, 0, 8), "cpu", None, {}) is None
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "training slot stays at" in err and "device cpu" in err
    fixed = cfg.replace(train=dataclasses.replace(cfg.train, resize_every=0))
    assert slot_sizer(fixed, ClusterSpec(32, 0, 8), "cpu", None, {}) is None
    assert capsys.readouterr().err == ""  # a fixed slot says nothing
