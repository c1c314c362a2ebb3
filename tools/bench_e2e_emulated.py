"""`tools/bench_e2e.py --emulated`: every deployment on one emulated cluster (pivot/emulate/),
beside the simulator's prediction for the identical configuration.

The runtime runs `--nproc` CPU ranks as emulated devices of `--hardware` serving the paper-scale
models of `--emulate`; the simulator runs the same cluster, allocation, hardware and samples
(the emulated run draws each sample's response and judge lengths from the simulator's workload,
`step_samples`, so both process the same samples). Throughput = tokens of the trained samples
(rollout prompt + response, judge prompt + response, paper scale) of the measured steps / the
emulated time of the measured window: by default the period-aligned steady state of
pivot/sim/window.py (steps 4..9 after 4 warm-up steps, the runtime running 2 steps past it so
the window does not drain alone), over seeds 0, 1, 2, each figure a mean (min-max), the same
window in the simulator; real/sim is its ratio to the simulator's.
"w/o tr.overrun" takes out the emulated seconds the training slot's real tiny-model compute ran
past its windows (a limit of the CPUs emulating the devices, not of the runtime). `--band` adds
the simulator's pivot/mode at the cost model's slow and fast corners (pivot/sim/band.py), for
the configuration; `--corner slow|fast` runs the emulated devices (and the simulator beside
them) at that corner, so the emulated figures get their own band from two more runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench_e2e_emulated_job import finish, launch, seed_job, window_of, window_s
from bench_e2e_emulated_report import Measured, report, report_band, shares_sim

from pivot.sim import HARDWARE, simulate
from pivot.sim.band import CORNERS, options_at
from pivot.sim.deploy import Allocation, deployment
from pivot.sim.window import DEFAULT_SEEDS

MODES = ("colocated", "disaggregated", "rr_colocated", "pivot", "static", "rule_based")


def add_args(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("--emulated")
    g.add_argument("--hardware", default="h20", choices=sorted(HARDWARE))
    g.add_argument(
        "--corner",
        default="nominal",
        choices=("nominal", *CORNERS),
        help="the devices' and the simulator's cost model at that end of its ranges (pivot/sim/band.py)",
    )
    g.add_argument(
        "--emulate",
        default="qwen2.5-7b+qwen3-30b-a3b",
        help="paper preset whose model sizes are emulated",
    )
    g.add_argument("--time-scale", type=float, default=0.03)
    g.add_argument("--length-scale", type=int, default=100)
    g.add_argument("--rollout-tp", type=int, default=1)
    g.add_argument("--reward-tp", type=int, default=1)
    g.add_argument("--train-devices", type=int, default=2)
    g.add_argument("--batch-prompts", type=int, default=8)
    g.add_argument("--group-size", type=int, default=16)
    g.add_argument("--seeds", type=int, nargs="+", default=list(DEFAULT_SEEDS))
    g.add_argument("--seed", type=int, default=None, help="one seed (same as --seeds N)")
    g.add_argument(
        "--warmup", type=int, default=None, help="steps before the measured window (default 4)"
    )
    g.add_argument("--out", default="runs/bench_emulated")
    g.add_argument(
        "--reuse",
        action="store_true",
        help="read the runs already in --out instead of running them again",
    )


def add_mode_args(ap: argparse.ArgumentParser) -> None:
    """Flags of the comparison across deployment modes (not of a single-mode job)."""
    g = ap.add_argument_group("--emulated, across modes")
    g.add_argument(
        "--rollout-devices",
        type=int,
        default=0,
        help="disaggregated rollout pool; 0 = half the rest",
    )
    g.add_argument(
        "--sim-only",
        action="store_true",
        help="only the simulator's figures (to choose a configuration)",
    )
    g.add_argument(
        "--band",
        action="store_true",
        help="also the simulator's pivot/mode at the cost model's slow and fast corners",
    )


def run(args: argparse.Namespace, extra: list[str]) -> None:
    w = window_of(args)
    seeds = [args.seed] if args.seed is not None else args.seeds
    world = args.nproc
    inference = world - args.train_devices
    unit = max(args.rollout_tp, args.reward_tp)
    rollout_devices = args.rollout_devices or max(unit, inference // 2 // unit * unit)
    results: dict[str, list[Measured]] = {}
    corners: dict[str, dict[str, list[float]]] = {c: {} for c in (CORNERS if args.band else ())}
    for seed in seeds:
        args.seed = seed
        job = seed_job(args, w)
        paper, opts, out = job.paper, job.opts, job.out
        for name in args.modes.split(","):
            sim_cfg = deployment(
                paper,
                name,
                Allocation(args.train_devices, rollout_devices if name == "disaggregated" else 0),
            )
            sim = simulate(sim_cfg, opts)
            for c, tps in corners.items():
                tps.setdefault(name, []).append(simulate(sim_cfg, options_at(opts, c)).throughput)
            if args.sim_only:
                print(
                    f"  {name}: sim {sim.throughput:,.0f} tok/s, window {sim.measured_s:,.0f} s, {sim.num_plans} plans, "  # noqa: E501 (one table row, easier read whole)
                    f"busy% ro/rm/tr/shift {shares_sim(sim)}"
                )
                continue
            done = args.reuse and (out / name / "emulated").is_dir()
            proc = None if done else launch(name, sim_cfg, world, out, extra)
            real = finish(name, proc, out, args.time_scale)
            results.setdefault(name, []).append(
                Measured(real, sim, window_s(out / name, w, args.time_scale))
            )
            print(
                f"  {name}: {real.emulated_s:,.0f} emulated s (sim {sim.sim_time_s:,.0f}), compute {real.compute_share:.0%} "  # noqa: E501 (one table row, easier read whole)
                f"of the windows, overrun {real.overrun_s:.2f} wall s over all ranks, of which the training slot's "
                f"{real.train_overrun_s:,.0f} emulated s",
                flush=True,
            )
    if results:
        report(results, world, args.length_scale, w)
    if corners:
        report_band(corners)
