"""Engine profiles: which inference engine's decode step the simulator prices.

The cost model's decode constants (pivot/sim/hardware.py) are fitted to SGLang on one H20
(`sglang`, the default: an engine replaying CUDA graphs, 0.35 of HBM bandwidth and 1.9 ms a
step). Pivot's embedded engine on a GPU today runs eager PyTorch, measured once on one H200
(torch 2.11, a 7B shape: Qwen2.5-7B's layers, docs/gpu.md):

    batch       1      64     256
    ms/step  69.7    71.7    86.7

That step is launch-bound, nearly flat in the batch. `embedded-eager` keeps the weight-bound
term B (same HBM efficiency) and fits the rest of the throughput model to the measurement:
the step overhead D from batch 1 (69.7 ms - B) and the compute-bound decode efficiency from
batch 256 (C * 256 + D = 86.7 ms); batch 64 then comes out at 69.7 ms (-2.8%). The profile
replaces those two constants on any hardware (the H20's are extrapolated: the overhead is the
host's launches, the same on both) and at the band's corners, which vary the rest: what is
measured has no range.

`embedded-flex-graphs` is a projection, not a measurement: the embedded engine on the path the
presets now serve (FlexAttention reading the K/V in place, decode steps replayed from CUDA
graphs). Counted on CPU at hub shapes (tools/bench_step.py, docs/gpu.md), its decode step reads
1.00-1.05x the HBM floor (weights and live K/V once) at batch 1-256 and 4K-16K positions,
replays as one launch, and reads the device once (the sampled tokens); its host bookkeeping was
0.07 / 0.53 / 1.96 ms a step at batch 1 / 64 / 256 on this project's CPU. That is the shape of
the sglang-class step the cost model is fitted to (the same HBM efficiency, a 2 ms overhead), so
the projection prices it with those constants until a GPU times it (`tools/gpu_check.sh`'s
`decode` check).
"""

from __future__ import annotations

import dataclasses

from pivot.sim.hardware import H200, HardwareProfile, model_spec

# (batch, seconds per decode step) of the embedded engine, eager, on one H200, a 7B shape
EAGER_STEPS_S: tuple[tuple[int, float], ...] = ((1, 0.0697), (64, 0.0717), (256, 0.0867))
_SHAPE = model_spec("/models/Qwen2.5-7B", 7.62)  # 15.23 GB of bf16 weights, as measured


def _fit_eager() -> dict[str, float]:
    """step_overhead_s and dec_eff of the eager engine, from its batch-1 and batch-256 steps."""
    (_, t1), _, (n_hi, t_hi) = EAGER_STEPS_S
    b = _SHAPE.weight_bytes / (H200.hbm_tb_s * 1e12 * H200.mem_eff)
    d = t1 - b
    c = (t_hi - d) / n_hi
    return {
        "step_overhead_s": d,
        "dec_eff": 2.0 * _SHAPE.active_params_b * 1e9 / (H200.peak_tflops * 1e12 * c),
    }


ENGINE_PROFILES: dict[str, dict[str, float]] = {
    "sglang": {},  # the hardware profile's own (fitted) decode constants
    "embedded-eager": _fit_eager(),
    "embedded-flex-graphs": {},  # a projection by count: the sglang-class constants (above)
}


def with_engine(hw: HardwareProfile, engine: str) -> HardwareProfile:
    """`hw` with `engine`'s decode constants (unchanged for the default `sglang`)."""
    if engine not in ENGINE_PROFILES:
        raise ValueError(f"engine profile {engine!r}: expected one of {', '.join(ENGINE_PROFILES)}")
    values = ENGINE_PROFILES[engine]
    if not values and engine == "sglang":
        return hw
    return dataclasses.replace(hw, name=f"{hw.name}+{engine}", **values)  # type: ignore[arg-type]
