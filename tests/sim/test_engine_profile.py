"""The measured H200 figures in the cost model (issue 48, item 3): the embedded engine's eager
decode step as an engine profile, and the measured GPS Read as a bound on a shift up's load."""

from __future__ import annotations

import pytest

from pivot.sim import H20, H200
from pivot.sim.band import CORNERS, corner
from pivot.sim.engine_profile import ENGINE_PROFILES, with_engine
from pivot.sim.hardware import decode_constants, inference_shift_s, model_spec

# measured on one H200, torch 2.11 (docs/gpu.md): eager decode steps of a 7B shape, and a GPS Read
MEASURED_STEP_MS = {1: 69.7, 64: 71.7, 256: 86.7}
READ_GB, READ_S = 15.23, 0.28
SEVEN_B = model_spec("/models/Qwen2.5-7B", 7.62)


@pytest.mark.parametrize("batch", sorted(MEASURED_STEP_MS))
def test_embedded_eager_reproduces_the_measured_decode_steps(batch: int) -> None:
    a, b, c, d = decode_constants(SEVEN_B, with_engine(H200, "embedded-eager"), 1)
    step = max(b, c * batch) + d  # the throughput model's step at a short context
    assert step * 1e3 == pytest.approx(MEASURED_STEP_MS[batch], rel=0.03)


def test_the_default_engine_is_the_fitted_sglang_class_one() -> None:
    assert with_engine(H200, "sglang") is H200
    a, b, c, d = decode_constants(SEVEN_B, H200, 1)
    # 15.24 GB at 0.35 of 4.8 TB/s plus 2 ms: about 6x faster than the eager engine at batch 1
    assert (b + d) * 1e3 == pytest.approx(15.24e9 / (0.35 * 4.8e12) * 1e3 + 2.0, rel=1e-3)
    with pytest.raises(ValueError, match="engine profile 'vllm'"):
        with_engine(H200, "vllm")
    assert set(ENGINE_PROFILES) == {"sglang", "embedded-eager", "embedded-flex-graphs"}


def test_the_flex_graphs_projection_is_priced_as_the_sglang_class_step() -> None:
    """A projection by count (reads at the floor, one launch, one host read a step): the same
    constants, under its own name so a table says which engine it priced."""
    hw = with_engine(H200, "embedded-flex-graphs")
    assert hw.name.endswith("+embedded-flex-graphs")
    assert decode_constants(SEVEN_B, hw, 1) == decode_constants(SEVEN_B, H200, 1)


@pytest.mark.parametrize("which", CORNERS)
def test_the_band_keeps_the_measured_engine(which: str) -> None:
    """The corners vary what is not measured; the eager step is, so it survives them."""
    hw = with_engine(corner(H200, which), "embedded-eager")
    assert hw.step_overhead_s == ENGINE_PROFILES["embedded-eager"]["step_overhead_s"]
    assert hw.dec_eff == ENGINE_PROFILES["embedded-eager"]["dec_eff"]


@pytest.mark.parametrize("hw", [H20, H200, corner(H20, "fast"), corner(H200, "slow")])
@pytest.mark.parametrize("tp", [1, 2, 4, 8])
def test_no_shift_up_reads_faster_than_the_measured_gps_read(hw, tp: int) -> None:  # noqa: ANN001
    per_device = SEVEN_B.weight_bytes / tp
    load = inference_shift_s(SEVEN_B, hw, tp, True) - hw.up_fixed_s
    assert load >= per_device / (READ_GB / READ_S * 1e9) * (1 - 0.01)


@pytest.mark.parametrize("hw", [H20, H200])
def test_at_nominal_the_hosts_shared_bandwidth_binds(hw) -> None:  # noqa: ANN001
    """The bound moves no nominal figure: a host's 30 GB/s shared by its devices is slower."""
    for tp in (1, 2, 4, 8):
        per_device = SEVEN_B.weight_bytes / tp
        load = inference_shift_s(SEVEN_B, hw, tp, True) - hw.up_fixed_s
        assert load == pytest.approx(per_device * min(tp, 8) / 30e9)
