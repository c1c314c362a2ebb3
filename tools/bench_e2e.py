"""End-to-end throughput of every deployment mode on the same tiny workload, in one invocation.

    python tools/bench_e2e.py [--steps 6] [--nproc 4] [extra pivot flags...]
    python tools/bench_e2e.py --emulated [--nproc 8] [--seeds 0] [--hardware h20] ...   (see below)

Each mode runs the main job (torchrun, CPU ranks) on the same data, models and seed. Throughput
follows the paper: total tokens processed (rollout prompt+response plus GenRM prompt+response)
over the time from the first step's start to the last step's end. Ratios are against pivot.

On plain CPU ranks that share a few cores, giving a role more ranks gives it no more compute,
so these ratios measure oversubscription, not shifting. `--emulated` runs every deployment on
emulated devices (pivot/emulate/: the real runtime and tiny models, with the device time of the
paper-scale models on --hardware) and prints the simulator's prediction for the identical
configuration beside each figure (tools/bench_e2e_emulated.py).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import bench_e2e_emulated  # noqa: E402
from torchrun_job import torchrun_main  # noqa: E402

MODES = {
    "colocated": ["--cluster.mode", "colocated"],
    "disaggregated": ["--cluster.mode", "disaggregated"],
    "rr_colocated": ["--cluster.mode", "rr_colocated"],
    "pivot": ["--cluster.mode", "pivot"],
}


def run_mode(
    name: str, flags: list[str], steps: int, nproc: int, extra: list[str], out: Path
) -> dict:
    run_dir = out / name
    cmd = torchrun_main(
        nproc,
        *flags,
        "--train.steps",
        str(steps),
        "--log.dir",
        str(run_dir),
        "--log.no-progress",
        "--checkpoint.every",
        "0",
        *extra,
    )
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    last = rows[-1]
    first_start = rows[0]["time"] - rows[0]["time/step_s"]
    seconds = last["time"] - first_start
    tokens = last["tokens/rollout"] + last["tokens/reward"]
    shifts = sum(
        1 for line in (run_dir / "timeline.jsonl").read_text().splitlines() if '"shift_up"' in line
    )
    return {
        "mode": name,
        "tokens": tokens,
        "seconds": seconds,
        "tok_s": tokens / seconds,
        "reward_last": last["reward/mean"],
        "shift_ups": shifts,
    }


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--steps",
        type=int,
        default=None,
        help="default 6; --emulated: the period-aligned window's (4 warm-up + 6 measured)",
    )
    ap.add_argument("--nproc", type=int, default=4)
    ap.add_argument("--modes", default=None, help="comma-separated; default: every mode")
    ap.add_argument(
        "--emulated", action="store_true", help="emulated devices, beside the simulator"
    )
    bench_e2e_emulated.add_args(ap)
    bench_e2e_emulated.add_mode_args(ap)
    args, extra = ap.parse_known_args()
    if args.emulated:
        args.modes = args.modes or ",".join(bench_e2e_emulated.MODES)
        bench_e2e_emulated.run(args, extra)
        return
    args.modes = args.modes or ",".join(MODES)
    args.steps = args.steps or 6
    with tempfile.TemporaryDirectory() as tmp:
        results = [
            run_mode(m, MODES[m], args.steps, args.nproc, extra, Path(tmp))
            for m in args.modes.split(",")
        ]
    ref = next((r for r in results if r["mode"] == "pivot"), results[0])
    print(
        f"\nend-to-end throughput, {args.steps} steps on {args.nproc} CPU ranks (tokens processed / time)"
    )
    print(
        f"{'mode':15s} {'tokens':>8s} {'seconds':>8s} {'tok/s':>8s} "
        f"{'pivot/mode':>11s} {'shift-ups':>9s} {'last reward':>11s}"
    )
    for r in results:
        print(
            f"{r['mode']:15s} {r['tokens']:8d} {r['seconds']:8.1f} {r['tok_s']:8.1f} "
            f"{ref['tok_s'] / r['tok_s']:10.2f}x {r['shift_ups']:9d} {r['reward_last']:11.3f}"
        )


if __name__ == "__main__":
    main()
