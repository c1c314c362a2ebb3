"""KV-preserving migration in the emulated runtime: the same pivot-mode job on the same emulated
cluster with `--planner.kv-migration` and with `--planner.no-kv-migration`, run at the same time
(so both see the same CPU load), reported as ratios of one against the other.

    python tools/bench_kv_migration.py [--nproc 16] [--steps 4] [--batch-prompts 16] [--time-scale 0.1] ...

Flags as tools/bench_e2e_emulated.py's (hardware, model group, TP, training pool, length and time
scale); the emulated time is the whole run's (first plan to last step), one seed. Prints per
run: emulated throughput (the trained samples' paper-scale tokens over emulated time), tokens
prefilled, of those re-prefilled (sequences resumed without their KV, or preempted),
KV tokens that migrated instead, fallbacks (KV a replica could not take), the tiny model's compute
share of the emulated windows and the wall seconds it overran them (high values mean the CPUs,
not the emulated devices, set the pace: raise --time-scale); then with/without ratios.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import bench_e2e_emulated as emu  # noqa: E402

from pivot.emulate import emulated_workload, paper_config, read_tallies  # noqa: E402
from pivot.emulate.measure import EmulatedRun, measure  # noqa: E402
from pivot.sim import HARDWARE, SimOptions, simulate  # noqa: E402
from pivot.sim.deploy import Allocation, deployment  # noqa: E402

RUNS = {"kv": ["--planner.kv-migration"], "reprefill": ["--planner.no-kv-migration"]}


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--nproc", type=int, default=16)
    ap.add_argument("--hardware", default="h20", choices=sorted(HARDWARE))
    ap.add_argument(
        "--emulate",
        default="qwen2.5-7b+qwen3-30b-a3b",
        help="paper preset whose model sizes are emulated",
    )
    ap.add_argument("--time-scale", type=float, default=0.1)
    ap.add_argument("--length-scale", type=int, default=100)
    ap.add_argument("--rollout-tp", type=int, default=1)
    ap.add_argument("--reward-tp", type=int, default=4)
    ap.add_argument("--train-devices", type=int, default=4)
    ap.add_argument("--batch-prompts", type=int, default=16)
    ap.add_argument("--group-size", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="runs/bench_kv_migration")
    ap.add_argument("--reuse", action="store_true", help="read the runs already in --out")
    args, extra = ap.parse_known_args()
    base = emu.base_config(args, args.steps)  # the same emulated job as bench_e2e --emulated
    paper = paper_config(base, args.nproc, args.nproc)
    cfg = deployment(paper, "pivot", Allocation(args.train_devices, 0))
    workload = emulated_workload(
        args.batch_prompts, args.group_size, emu.tiny_shape(base), args.length_scale
    )
    sim = simulate(
        cfg, SimOptions(hardware=HARDWARE[args.hardware], workload=workload, steps=args.steps)
    )
    out = ROOT / args.out
    print(
        f"emulated {args.nproc} x {args.hardware} serving {args.emulate} (rollout TP{args.rollout_tp}, GenRM "
        f"TP{args.reward_tp}), pivot mode, {args.steps} steps, time scale {args.time_scale:g}, length scale "
        f"{args.length_scale}; {workload.describe(args.nproc)}",
        flush=True,
    )
    procs = {}
    for name, flags in RUNS.items():
        if args.reuse and (out / name / "emulated").is_dir():
            continue
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            str(args.nproc),
            str(ROOT / "pivot" / "main.py"),
            *emu.flags_of(cfg),
            "--log.dir",
            str(out / name),
            *flags,
            *extra,
        ]
        env = {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}
        procs[name] = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **env},
        )
    for name, p in procs.items():
        text, _ = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"{name} failed:\n{text[-3000:]}")
    runs = {name: measure(out / name, args.time_scale, read_tallies(out / name)) for name in RUNS}
    report(runs, sim.tokens)


def report(runs: dict[str, EmulatedRun], tokens: float) -> None:
    print(
        f"\n{'run':10s} {'tok/s':>9s} {'prefilled':>9s} {'re-prefilled':>12s} {'KV moved':>9s} {'fallback':>8s} "
        f"{'plans':>5s} {'compute%':>8s} {'overrun s':>9s}"
    )
    for name, r in runs.items():
        print(
            f"{name:10s} {tokens / r.emulated_s:9,.0f} {r.prefill_tokens:9,d} {r.reprefill_tokens:12,d} "
            f"{r.kv_imported_tokens:9,d} {r.kv_fallback_tokens:8,d} {r.plans:5d} {100 * r.compute_share:8.0f} "
            f"{r.overrun_s:9.1f}"
        )
    kv, re = runs["kv"], runs["reprefill"]
    print(
        f"\nkv / reprefill: throughput x{re.emulated_s / kv.emulated_s:.3f}, prefilled tokens "
        f"x{kv.prefill_tokens / max(re.prefill_tokens, 1):.3f}, re-prefilled tokens "
        f"x{kv.reprefill_tokens / max(re.reprefill_tokens, 1):.3f}"
    )


if __name__ == "__main__":
    main()
