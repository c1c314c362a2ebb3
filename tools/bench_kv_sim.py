"""KV-preserving migration in the simulator: PivotRL with `planner.kv_migration` on and off, the
same preset, allocation, seeds and aligned window, reported as ratios of one against the other.

    python tools/bench_kv_sim.py                                   # 4 groups, H20 and H200, seeds 0 1 2
    python tools/bench_kv_sim.py --groups qwen2.5-1.5b+glm-z1-9b --hardware h200 --seeds 0
    python tools/bench_kv_sim.py --use qwen2.5-7b+qwen3-30b-a3b=8  # PivotRL's training slot per group

Each run is one PivotRL simulation at a fixed allocation (no search: `--use GROUP=T`, default
each preset's training pool), one at a time. The window is pivot/sim/window.py's aligned one
(4 warm-up steps, then whole staleness periods: steps 4..9 at staleness 2). Per group, hardware
and seed it prints tokens/s, prefilled tokens, re-prefilled tokens (resumed without their KV, or
preempted) and KV-moved tokens, on / off; then the ratios per seed and their mean; `--band`
adds the on/off ratio at the cost model's slow and fast corners (pivot/sim/band.py; seed 0
unless `--band-seeds`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_sim import GROUPS, add_band_args  # noqa: E402  (the paper's four groups, listed once)

from configs.presets import paper_preset  # noqa: E402
from pivot.sim import HARDWARE, SimOptions, SimResult, Workload, simulate  # noqa: E402
from pivot.sim.band import CORNERS, corner  # noqa: E402
from pivot.sim.deploy import Allocation, deployment  # noqa: E402
from pivot.sim.hardware import HardwareProfile  # noqa: E402
from pivot.sim.window import DEFAULT_SEEDS, aligned_window  # noqa: E402


def run(
    group: str,
    hw: HardwareProfile,
    seed: int,
    train: int | None,
    kv: bool,
    args: argparse.Namespace,
) -> SimResult:
    cfg = paper_preset(group)
    cfg.seed = seed
    cfg = deployment(cfg, "pivot", Allocation(train or cfg.train.devices))
    cfg.planner.kv_migration = kv
    w = aligned_window(cfg.train.staleness)
    n = args.steps or w.steps
    workload = Workload(prompts_per_step=args.prompts, group_size=args.group_size)
    opts = SimOptions(hardware=hw, steps=n, warmup_steps=min(w.warmup, n - 1), workload=workload)
    return simulate(cfg, opts)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--groups", nargs="+", default=list(GROUPS))
    ap.add_argument("--hardware", nargs="+", default=["h20", "h200"], choices=sorted(HARDWARE))
    ap.add_argument("--seeds", type=int, nargs="+", default=list(DEFAULT_SEEDS))
    ap.add_argument(
        "--use", nargs="+", default=[], metavar="GROUP=T", help="PivotRL's training slot per group"
    )
    ap.add_argument("--steps", type=int, default=None, help="steps (default: the aligned window's)")
    ap.add_argument(
        "--prompts", type=int, default=None, help="prompts per step (default: 4 per device)"
    )
    ap.add_argument("--group-size", type=int, default=16)
    add_band_args(ap, "also on the cost model's slow and fast corners", [0])
    args = ap.parse_args()
    use = {g: int(t) for g, t in (u.split("=") for u in args.use)}
    t0 = time.perf_counter()
    print(
        "group hardware seed | tok/s off on | prefilled off on | re-prefilled off on | KV moved | "
        "throughput on/off | re-prefilled on/off | wall s",
        flush=True,
    )
    for group in args.groups:
        for hw in args.hardware:
            gains, cuts = [], []
            for seed in args.seeds:
                t1 = time.perf_counter()
                off = run(group, HARDWARE[hw], seed, use.get(group), False, args)
                on = run(group, HARDWARE[hw], seed, use.get(group), True, args)
                gain = on.throughput / off.throughput
                cut = on.reprefill_tokens / max(off.reprefill_tokens, 1)
                gains.append(gain)
                cuts.append(cut)
                print(
                    f"{group} {hw} {seed} | {off.throughput:,.0f} {on.throughput:,.0f} | "
                    f"{off.prefill_tokens:,d} {on.prefill_tokens:,d} | {off.reprefill_tokens:,d} "
                    f"{on.reprefill_tokens:,d} | {on.kv_moved_tokens:,d} | x{gain:.3f} | x{cut:.3f} | "
                    f"{time.perf_counter() - t1:.0f}",
                    flush=True,
                )
            print(
                f"{group} {hw} mean over seeds {args.seeds}: throughput x{statistics.mean(gains):.3f} "
                f"(x{min(gains):.3f}..x{max(gains):.3f}), re-prefilled x{statistics.mean(cuts):.3f}",
                flush=True,
            )
            if args.band:
                print(f"{group} {hw} band: {band(group, hw, use.get(group), args)}", flush=True)
    print(f"total wall {time.perf_counter() - t0:.0f} s")


def band(group: str, hw: str, train: int | None, args: argparse.Namespace) -> str:
    """Throughput on/off at each corner of the cost model, over the band's seeds."""
    parts = []
    for c in CORNERS:
        gains = [
            run(group, corner(HARDWARE[hw], c), seed, train, True, args).throughput
            / run(group, corner(HARDWARE[hw], c), seed, train, False, args).throughput
            for seed in args.band_seeds
        ]
        parts.append(f"{c} x{statistics.mean(gains):.3f}")
    return f"throughput on/off {', '.join(parts)} (seeds {' '.join(map(str, args.band_seeds))})"


if __name__ == "__main__":
    main()
