"""The public measurements the decode and prefill constants of pivot/sim/hardware.py are fit to.

Source: Qwen's own speed benchmark of the Qwen3 series with SGLang 0.4.6.post1 on one NVIDIA
H20 96GB, batch size 1, BF16, generating 2048 tokens after an input of 1, 6144, ... tokens;
speed = (prompt + generated tokens) / time (QwenLM/Qwen3, docs/source/getting_started/
speed_benchmark.md, commit 7a2f61f: the "(SGLang)" tables; Qwen3-8B line 421, 14B line 549,
32B line 677, 30B-A3B line 805, each with the rows for longer inputs below it).

At batch 1 a decode step reads the weights once (an MoE only its active experts) and the KV of
the context, plus a fixed per-step overhead (sampling, launches, scheduling):

    t_step = (weight_bytes_read + kv_bytes_per_token * context) / (hbm_bw * mem_eff) + D

so the time of the input-1 runs is linear in (1 / mem_eff, D): `fit_decode` solves the least
squares over the four models. A longer input adds its prefill (compute bound) and the reads
of its KV during the 2048 steps: `fit_prefill_eff` takes the difference between the 6144- and
the 1-token runs of the dense models, removes the extra KV reads at the fitted bandwidth, and
returns the share of peak FLOP/s the prefill of 6144 tokens reached.

Model numbers from the models' config.json / model cards (params in billions; embedding rows
are looked up, not read, so `read_b` excludes the input embedding; the untied LM head is read).
"""

from __future__ import annotations

from dataclasses import dataclass

GENERATED = 2048


@dataclass(frozen=True)
class Measured:
    model: str
    read_b: float
    """Parameters read per decode step at batch 1, billions (MoE: active, no input embedding)."""
    kv_bytes_per_token: float
    speed: dict[int, float]
    """Input length -> tokens/s, batch 1."""


def _kv(layers: int, kv_heads: int, head_dim: int = 128) -> float:
    return 2.0 * layers * kv_heads * head_dim * 2.0


# (params - input embedding (vocab 151,936 x hidden)); speeds from the SGLang tables, BF16, 1 GPU
QWEN3_SGLANG_H20: tuple[Measured, ...] = (
    Measured("Qwen3-8B", 8.19 - 0.62, _kv(36, 8), {1: 81.73, 6144: 296.25, 14336: 524.70}),
    Measured("Qwen3-14B", 14.77 - 0.78, _kv(40, 8), {1: 47.10, 6144: 174.85, 14336: 317.56}),
    Measured("Qwen3-32B", 32.76 - 0.78, _kv(64, 8), {1: 20.72, 6144: 77.82, 14336: 143.08}),
    Measured("Qwen3-30B-A3B", 3.3 - 0.31, _kv(48, 4), {1: 137.18, 6144: 490.10, 14336: 849.62}),
)
QWEN3_DENSE_PARAMS_B = {"Qwen3-8B": 8.19, "Qwen3-14B": 14.77, "Qwen3-32B": 32.76}
H20_HBM = 4.0e12
H20_FLOPS = 148e12


def run_s(m: Measured, prompt: int) -> float:
    """Seconds of the benchmark's run with `prompt` input tokens."""
    return (prompt + GENERATED) / m.speed[prompt]


def _read_terms(m: Measured, prompt: int) -> float:
    """Bytes read over the 2048 decode steps after `prompt` tokens, per unit of bandwidth."""
    ctx = GENERATED * prompt + GENERATED * (GENERATED - 1) / 2
    return (GENERATED * 2.0 * m.read_b * 1e9 + m.kv_bytes_per_token * ctx) / H20_HBM


def fit_decode(points: tuple[Measured, ...] = QWEN3_SGLANG_H20) -> tuple[float, float]:
    """(mem_eff, step overhead D in seconds) of the least-squares fit of the input-1 runs."""
    xs = [_read_terms(m, 1) for m in points]
    ys = [run_s(m, 1) for m in points]
    n, sx, sy = len(xs), sum(xs), sum(ys)
    sxx, sxy = sum(x * x for x in xs), sum(x * y for x, y in zip(xs, ys))
    slope = (n * sxy - sx * sy) / (n * sxx - sx * sx)  # seconds per unit = 1 / mem_eff
    intercept = (sy - slope * sx) / n  # 2048 steps of overhead
    return 1.0 / slope, intercept / GENERATED


def fit_prefill_eff(
    mem_eff: float, points: tuple[Measured, ...] = QWEN3_SGLANG_H20, prompt: int = 6144
) -> float:
    """Mean share of peak FLOP/s the dense models' prefill of `prompt` tokens reached."""
    effs = []
    for m in points:
        if m.model not in QWEN3_DENSE_PARAMS_B:
            continue
        extra_reads = (_read_terms(m, prompt) - _read_terms(m, 1)) / mem_eff
        prefill = run_s(m, prompt) - run_s(m, 1) - extra_reads
        effs.append(2.0 * QWEN3_DENSE_PARAMS_B[m.model] * 1e9 * prompt / prefill / H20_FLOPS)
    return sum(effs) / len(effs)


def predicted_speed(
    m: Measured, prompt: int, mem_eff: float, step_s: float, prefill_eff: float, params_b: float
) -> float:
    """The benchmark's tokens/s the cost model predicts for `m` (what the fit is checked against)."""
    t = _read_terms(m, prompt) / mem_eff + GENERATED * step_s
    if prompt > 1:
        t += 2.0 * params_b * 1e9 * prompt / (H20_FLOPS * prefill_eff)
    return (prompt + GENERATED) / t
