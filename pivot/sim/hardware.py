"""Hardware and model profiles, and every cost the simulator derives from them.

Every constant below, its public source and its plausible range are in one table,
docs/simulator_cost_model.md (the ranges are `pivot/sim/band.py`'s, which runs the sensitivity
band). Decode latency (the scheduler's model, paper Appendix A), per replica of `tp` devices,
bf16 weights and KV:

    A = kv_bytes_per_token / (tp * hbm_bw * mem_eff)       attention reads the whole KV each step
    B = weight_bytes        / (tp * hbm_bw * mem_eff)      FFN bound by loading the weights
                                                           (MoE: all experts, since a batch of
                                                           dozens of sequences touches nearly all:
                                                           1 - (1 - 8/128)^64 = 98% for Qwen3-30B-A3B)
    C = 2 * active_params   / (tp * peak_flops * dec_eff)  FFN bound by compute, per sequence
    D = step_overhead_s + tp_overhead_s * (tp - 1)         sampling, launches, TP all-reduces

`mem_eff` and `step_overhead_s` are the least-squares fit (pivot/sim/calibration.py) of Qwen's
SGLang benchmark on one H20 at batch 1 (Qwen3-8B 81.7 tok/s, 14B 47.1, 32B 20.7, 30B-A3B 137:
35% of peak HBM bandwidth and 1.9 ms per step), `prefill_eff` the same benchmark's longer
inputs (59-62% of peak on a 6K-14K prompt). The H200 takes the H20's efficiencies (no public
batch-1 table of the same kind); the band covers it.

KV capacity = tp * gpu_memory * mem_fraction - weight_bytes, in tokens of kv_bytes_per_token.
Prefill of l tokens costs 2 * active_params * l / (tp * peak_flops * prefill_eff).
Training of n tokens costs (6 + 2 * forwards) * params * n / (devices * peak_flops * train_mfu):
the update (forward and backward, 6N) plus the forward-only passes before it, as veRL runs them
(volcengine/verl verl/trainer/ppo/ray_trainer.py, `fit`: "recompute old_log_probs" under the
`old_log_prob` timer, then `compute_ref_log_prob` under `ref` when a reference policy is used):
the old-log-prob forward (2N, a third of the update) always, the reference forward when the
loss has a KL term (`train.kl_coef > 0`).

Shift costs (paper Figure 12: inference up ~1 s (1.5B) to ~9 s (122B), down < 2 s; training up
2-8.5 s, down < 6 s). A shift up reads the weights from GPS in host memory; the devices of one
host share its host-to-device bandwidth `host_bw`:

    inference up   = up_fixed_s + max(host_bytes(weights) / host_bw,
                                      weights per device / device_read_bw)
    inference down = down_fixed_s + per-device weight GB * down_s_per_gb      (discard)
    training up    = train_up_fixed_s + host_bytes(16 B/param) / train_reload_bw   (bf16 params,
                     fp32 master, Adam moments reloaded from pinned host memory)
    training down  = train_down_fixed_s + host_bytes(12 B/param) / host_bw   (offload optimizer)

where host_bytes(x) = x per device times the devices of the role on one host (at most 8), and
`device_read_bw` is what one device measurably Reads from GPS (below): no share of the host's
bandwidth makes a device read faster than that.
The fixed terms (process-group re-join, allocator, CUDA graphs) are fitted to Figure 12's
smallest model; the bandwidths to its largest. The colocated deployment's rollout phase does
not read from host memory: as colocated frameworks do, the trainer pushes the new policy into
the inference engine in buckets (slime + SGLang: ~16 s for a 30B MoE, zhaochenyang20/
Awesome-ML-SYS-Tutorial issue 169), so its rollout up costs

    colocated rollout up = up_fixed_s + weight_bytes / weight_sync_bw       (whole model, each engine)
"""

from __future__ import annotations

from dataclasses import dataclass

from pivot.sched.throughput import step_latency


class SimConfigError(ValueError):
    """An impossible simulated deployment; the message names the field and the value."""


@dataclass(frozen=True)
class HardwareProfile:
    name: str
    hbm_tb_s: float
    """HBM bandwidth per device, TB/s."""
    peak_tflops: float
    """Dense bf16 peak per device, TFLOP/s."""
    memory_gb: float
    """HBM per device, GB."""
    devices_per_node: int = 8
    nvlink_gb_s: float = 900.0
    ib_gb_s: float = 50.0
    host_bw_gb_s: float = 30.0
    """Host memory -> devices of one host, aggregate GB/s (GPS Read path)."""
    device_read_gb_s: float = 54.5
    """GPS Read into one device from pinned host memory, GB/s: measured, a 7B model's 15.23 GB
    bf16 in 0.28 s on one H200 (torch 2.11, 0.99 of a raw pinned host-to-device copy; docs/gpu.md).
    The H20 (PCIe Gen5 x16 as well) takes it unmeasured. A bound, not a fit: the aggregate
    `host_bw_gb_s` shared by a host's devices is the tighter at every nominal share."""
    train_reload_gb_s: float = 22.0
    """Host -> training devices of one host when reloading optimizer state, aggregate GB/s."""
    mem_eff: float = 0.35
    """Share of peak HBM bandwidth decode reads at (fit: pivot/sim/calibration.py)."""
    dec_eff: float = 0.3
    """Decode reaches a smaller share of peak than training (small GEMMs, sampling, launches)."""
    prefill_eff: float = 0.6
    """Share of peak FLOP/s of a prefill (fit: pivot/sim/calibration.py)."""
    train_mfu: float = 0.45
    mem_fraction: float = 0.9
    step_overhead_s: float = 0.002
    """Fixed seconds per decode step (fit: pivot/sim/calibration.py)."""
    tp_overhead_s: float = 0.0005
    up_fixed_s: float = 1.0
    down_fixed_s: float = 0.5
    down_s_per_gb: float = 0.02
    train_up_fixed_s: float = 2.0
    train_down_fixed_s: float = 1.0
    weight_sync_gb_s: float = 3.8
    """Trainer -> inference engine weight update of a colocated framework, GB of weights per
    second (slime's bucketed update: 61 GB of Qwen3-30B-A3B in ~16 s)."""


H20 = HardwareProfile("h20", hbm_tb_s=4.0, peak_tflops=148.0, memory_gb=96.0)
H200 = HardwareProfile("h200", hbm_tb_s=4.8, peak_tflops=989.0, memory_gb=141.0)
HARDWARE: dict[str, HardwareProfile] = {"h20": H20, "h200": H200}


@dataclass(frozen=True)
class ModelSpec:
    """What the costs need of a model (public architecture numbers)."""

    name: str
    params_b: float
    active_params_b: float
    layers: int
    """Layers with a KV cache (hybrid models: the full-attention layers only)."""
    kv_heads: int
    head_dim: int

    @property
    def weight_bytes(self) -> float:
        return 2.0 * self.params_b * 1e9

    @property
    def kv_bytes_per_token(self) -> float:
        return 2.0 * self.layers * self.kv_heads * self.head_dim * 2.0  # K and V, bf16


# Architecture numbers from the models' config.json. Qwen3.5-122B-A10B is hybrid (linear
# attention in 3 of 4 layers, whose state does not grow): 12 full-attention layers assumed.
_ARCH: dict[str, tuple[int, int, int]] = {
    "Qwen2.5-1.5B": (28, 2, 128),
    "Qwen2.5-7B": (28, 4, 128),
    "Qwen2.5-32B": (64, 8, 128),
    "Qwen2.5-72B": (80, 8, 128),
    "GLM-Z1-9B-0414": (40, 2, 128),
    "Qwen3-30B-A3B": (48, 4, 128),
    "Qwen3.5-122B-A10B": (12, 2, 256),
}


def model_spec(path: str, params_b: float, active_params_b: float = 0.0) -> ModelSpec:
    """The spec of a preset's model (`/models/<name>`); unknown names get a dense guess."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    if params_b <= 0:
        raise SimConfigError(
            f"model params_b={params_b!r} for {name or path!r}: the simulator needs the size"
        )
    layers, kv_heads, head_dim = _ARCH.get(name, (max(16, int(8 * params_b**0.5)), 8, 128))
    return ModelSpec(name, params_b, active_params_b or params_b, layers, kv_heads, head_dim)


# ---------------------------------------------------------------- derived costs
def decode_constants(
    m: ModelSpec, hw: HardwareProfile, tp: int
) -> tuple[float, float, float, float]:
    """(A, B, C, D) of the throughput model for one replica of `tp` devices."""
    bw = tp * hw.hbm_tb_s * 1e12 * hw.mem_eff
    flops = tp * hw.peak_tflops * 1e12 * hw.dec_eff
    return (
        m.kv_bytes_per_token / bw,
        m.weight_bytes / bw,
        2.0 * m.active_params_b * 1e9 / flops,
        hw.step_overhead_s + hw.tp_overhead_s * (tp - 1),
    )


def decode_steps_s(a: float, b: float, c: float, d: float, n: int, tok: int, k: int) -> float:
    """Seconds of `k` decode steps of `n` running sequences holding `tok` KV tokens at the first
    (each step adds n): the throughput model's step time summed in closed form,
    k * (A * tok + max(B, C * n) + D) + A * n * k * (k - 1) / 2."""
    return k * step_latency(a, b, c, d, n, tok) + a * n * k * (k - 1) / 2


def kv_capacity_tokens(m: ModelSpec, hw: HardwareProfile, tp: int, field: str) -> int:
    """KV tokens one replica holds; raises naming `field` when the weights do not fit."""
    free = tp * hw.memory_gb * 1e9 * hw.mem_fraction - m.weight_bytes
    cap = int(free // m.kv_bytes_per_token)
    if cap < 32768:
        raise SimConfigError(
            f"{field}={tp}: {m.name} ({m.weight_bytes / 1e9:.0f} GB of weights) "
            f"leaves room for {max(cap, 0)} KV tokens "
            f"on {tp} x {hw.memory_gb:.0f} GB {hw.name} devices; use a larger TP group"
        )
    return cap


def prefill_s(m: ModelSpec, hw: HardwareProfile, tp: int, tokens: int) -> float:
    return 2.0 * m.active_params_b * 1e9 * tokens / (tp * hw.peak_tflops * 1e12 * hw.prefill_eff)


def train_s(
    m: ModelSpec, hw: HardwareProfile, devices: int, tokens: int, forwards: int = 1
) -> float:
    """A training step over `tokens`: the update (6N per token) and `forwards` forward-only passes
    (2N each: the old-log-prob forward, plus the reference forward under a KL term)."""
    flops = (6.0 + 2.0 * forwards) * m.params_b * 1e9 * tokens
    return flops / (devices * hw.peak_tflops * 1e12 * hw.train_mfu)


def weight_sync_s(m: ModelSpec, hw: HardwareProfile) -> float:
    """A colocated framework's rollout phase up: push the new policy into the engine."""
    return hw.up_fixed_s + m.weight_bytes / (hw.weight_sync_gb_s * 1e9)


def check_train_fits(m: ModelSpec, hw: HardwareProfile, devices: int) -> None:
    """FSDP shards 16 B/param (bf16 params and grads, fp32 master and Adam moments) plus room."""
    need_gb = 16.0 * m.params_b / max(devices, 1)
    if devices > 0 and need_gb > 0.7 * hw.memory_gb:
        raise SimConfigError(
            f"train.devices={devices}: {m.name} needs {need_gb:.0f} GB of training state per device "
            f"(> 70% of {hw.memory_gb:.0f} GB); use more devices"
        )


def _host_share(devices: int, hw: HardwareProfile) -> int:
    return min(devices, hw.devices_per_node)


def inference_shift_s(m: ModelSpec, hw: HardwareProfile, tp: int, up: bool) -> float:
    per_device = m.weight_bytes / tp
    if up:
        host = per_device * _host_share(tp, hw) / (hw.host_bw_gb_s * 1e9)
        return hw.up_fixed_s + max(host, per_device / (hw.device_read_gb_s * 1e9))
    return hw.down_fixed_s + per_device / 1e9 * hw.down_s_per_gb


def train_shift_s(m: ModelSpec, hw: HardwareProfile, devices: int, up: bool) -> float:
    share = _host_share(devices, hw) / max(devices, 1)
    if up:
        return hw.train_up_fixed_s + 16.0 * m.params_b * 1e9 * share / (hw.train_reload_gb_s * 1e9)
    return hw.train_down_fixed_s + 12.0 * m.params_b * 1e9 * share / (hw.host_bw_gb_s * 1e9)
