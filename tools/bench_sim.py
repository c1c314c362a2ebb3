"""Simulated Figure 9 (deployments x model groups), Figure 11 (ablations), Figure 14 (H sweep),
each beside the paper's numbers, plus a Figure 10 style timeline PNG.

    python tools/bench_sim.py                                  # Figure 9, every deployment tuned
    python tools/bench_sim.py --band                           # + the cost model's sensitivity band
    python tools/bench_sim.py --alloc table4                   # the paper's Table 4 allocations
    python tools/bench_sim.py --seeds 0 --steps 6 --warmup 0   # one seed, whole run (quick look)
    python tools/bench_sim.py --ablations --hsweep qwen2.5-7b+qwen3-30b-a3b --timeline runs/sim/timeline.png
    python tools/bench_sim.py --groups qwen2.5-7b+qwen3-30b-a3b --hardware h200 --prompts 64
    python tools/bench_sim.py --engine-profile embedded-eager   # Pivot's eager engine, as measured

The default window is the steady state over whole staleness periods (pivot/sim/window.py: 4
warm-up steps, then 6 measured steps, 2 periods of 3 at staleness 2), over seeds 0, 1, 2; each
search tunes on the same window (mean over --search-seeds, default the first seed). Every figure
is a mean with its min-max over the seeds: tokens/s and ratios, PivotRL over each baseline
(per seed, on the same samples), sim/paper for the absolute values, the tighter of the
critical-path and the work bound (pivot/sim/report.py: what no deployment with that staleness,
pools and cost model can beat; "train" when it is the training slot's steps back to back) and
each run's share of its own bound, and each role's device time as
busy/idle/shifting (first seed). `--band` re-runs every deployment at its tuned allocation on
the cost model's slow and fast corners (pivot/sim/band.py) and prints each ratio there too,
Figure 11's and 14's included (each corner's variants over that corner's own reference).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_sim_figures import fig9, fig11, hsweep, shift_costs  # noqa: E402
from bench_sim_paper import GROUPS  # noqa: E402  (bench_kv_sim.py reads it from here)
from bench_sim_runs import preset  # noqa: E402

from pivot.sim import HARDWARE, SimOptions, Workload  # noqa: E402
from pivot.sim.deploy import Allocation  # noqa: E402
from pivot.sim.engine_profile import ENGINE_PROFILES  # noqa: E402
from pivot.sim.timeline import render_timeline  # noqa: E402
from pivot.sim.window import DEFAULT_SEEDS, Window, aligned_window, is_aligned  # noqa: E402


def parse_use(text: str) -> tuple[str, Allocation]:
    name, _, alloc = text.partition("=")
    try:
        pools = [int(x) for x in alloc.split("/")]
        return name, Allocation(*pools)
    except (ValueError, TypeError):
        raise SystemExit(f"--use {text!r}: expected NAME=T or NAME=T/R (devices)") from None


def window_of(args: argparse.Namespace) -> Window:
    """--steps/--warmup as given, else the aligned window of the groups' staleness."""
    if args.steps is None and args.warmup is None:
        return aligned_window(args.staleness)
    warmup = 4 if args.warmup is None else args.warmup
    steps = args.steps if args.steps is not None else aligned_window(args.staleness, warmup).steps
    if not 0 <= warmup < steps:
        raise SystemExit(f"--warmup {warmup}: need 0 <= it < --steps {steps}")
    w = Window(warmup, steps - warmup)
    if warmup and not is_aligned(w, args.staleness):
        print(
            f"warning: {w.describe(args.staleness)}: a window that is not whole staleness periods cuts a burst"
        )
    return w


def add_band_args(ap: argparse.ArgumentParser, what: str, seeds: list[int] | None) -> None:
    """--band (`what` it adds) and --band-seeds (default `seeds`, None: the run's --seeds)."""
    ap.add_argument("--band", action="store_true", help=f"{what} (pivot/sim/band.py)")
    ap.add_argument(
        "--band-seeds",
        type=int,
        nargs="+",
        default=seeds,
        help=f"seeds of the band's runs (default: {'--seeds' if seeds is None else seeds})",
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", nargs="+", default=list(GROUPS))
    ap.add_argument("--hardware", default="h20", choices=sorted(HARDWARE))
    ap.add_argument(
        "--engine-profile",
        default="sglang",
        choices=list(ENGINE_PROFILES),
        help="whose decode step the replicas run at (pivot/sim/engine_profile.py): the fitted "
        "sglang-class engine, or Pivot's embedded engine as measured eager on an H200",
    )
    ap.add_argument(
        "--steps",
        type=int,
        default=None,
        help="steps to run (default: the aligned window's, warm-up + whole staleness periods)",
    )
    ap.add_argument(
        "--warmup",
        type=int,
        default=None,
        help="steps left out of the throughput (steady state: prompts keep coming past the last step); "
        "default 4",
    )
    ap.add_argument("--seeds", type=int, nargs="+", default=list(DEFAULT_SEEDS))
    ap.add_argument("--seed", type=int, default=None, help="one seed (same as --seeds N)")
    ap.add_argument(
        "--search-seeds",
        type=int,
        nargs="+",
        default=None,
        help="seeds each search point averages (default: the first of --seeds)",
    )
    ap.add_argument(
        "--use",
        nargs="+",
        default=[],
        metavar="NAME=T[/R]",
        help="a deployment's allocation, not searched: training pool T (and disaggregated's rollout "
        "pool R), e.g. disaggregated=8/8 pivot=16",
    )
    add_band_args(ap, "also measure on the cost model's slow and fast corners", None)
    ap.add_argument(
        "--prompts",
        type=int,
        default=None,
        help="prompts per step (default: 4 per device, DAPO's ratio)",
    )
    ap.add_argument("--group-size", type=int, default=16)
    ap.add_argument(
        "--alloc",
        default="search",
        choices=("search", "table4"),
        help="search: tune every deployment's pools alike; table4: the paper's allocations",
    )
    ap.add_argument(
        "--kv",
        default="engine",
        choices=("engine", "device"),
        help="replica KV: the engine config's kv_capacity_tokens (as the runtime) or all free device memory",
    )
    ap.add_argument("--ablations", action="store_true")
    ap.add_argument("--hsweep", default="", help="model group of the H sweep (empty: skip)")
    ap.add_argument(
        "--timeline",
        default="",
        help="PNG path: disaggregated vs pivot timeline of the first group",
    )
    args = ap.parse_args()
    args.seeds = [args.seed] if args.seed is not None else args.seeds
    args.use = dict(parse_use(u) for u in args.use)
    args.search_seeds = args.search_seeds or args.seeds[:1]
    args.band_seeds = args.band_seeds or args.seeds
    args.staleness = max(preset(g, 0).train.staleness for g in args.groups)
    args.window = window_of(args)
    workload = Workload(prompts_per_step=args.prompts, group_size=args.group_size)
    opts = SimOptions(
        hardware=HARDWARE[args.hardware],
        engine=args.engine_profile,
        steps=args.window.steps,
        workload=workload,
        kv_from_engine=args.kv == "engine",
        warmup_steps=args.window.warmup,
    )
    t0 = time.perf_counter()
    shift_costs(args.groups, opts, args.seeds[0])
    runs, bands = fig9(args.groups, opts, args)
    if args.ablations:
        fig11(args.groups, opts, args, runs, bands)
    if args.hsweep:
        hsweep(args.hsweep, opts, args, runs)
    if args.timeline:
        g = args.groups[0]
        path = render_timeline(
            {"Disaggregated": runs[g]["disaggregated"][1][0], "PivotRL": runs[g]["pivot"][1][0]},
            args.timeline,
        )
        print(f"\ntimeline: {path}")
    print(f"\ntotal wall {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
