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
busy/idle/shifting (first seed). `--band` re-runs every deployment on the cost model's slow
and fast corners (pivot/sim/band.py), each re-tuned there by the same search as a user who
measured those costs would (a given allocation stays), plus PivotRL with `--train.devices
auto` launched at its nominal slot and sizing itself as a run does (pivot/sim/autosize.py), and
prints each ratio there: auto over every re-tuned baseline, auto over PivotRL re-tuned; Figure
11's and 14's too (each corner's variants at the nominal slot over that corner's re-tuned
disaggregated, or their own H).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from configs.presets import paper_preset
from pivot.sim import HARDWARE, SimOptions, SimResult, Workload, simulate
from pivot.sim.autosize import decide, label, replay
from pivot.sim.band import CORNERS, options_at
from pivot.sim.costs import build_cluster
from pivot.sim.deploy import Allocation, deployment, search, table4, world_of
from pivot.sim.engine_profile import ENGINE_PROFILES, with_engine
from pivot.sim.report import bound_s, bound_share, breakdown, shift_ups_per_step
from pivot.sim.timeline import render_timeline
from pivot.sim.window import DEFAULT_SEEDS, Spread, Window, aligned_window, is_aligned

# The paper's figures the simulated ones are printed beside, and its four model groups
# (bench_kv_sim.py reads GROUPS from here; it and bench_bound.py, add_band_args).
GROUPS = (
    "qwen2.5-1.5b+glm-z1-9b",
    "qwen2.5-7b+qwen3-30b-a3b",
    "qwen2.5-32b+qwen3-30b-a3b",
    "qwen2.5-72b+qwen3.5-122b-a10b",
)
BASELINES = ("colocated", "disaggregated", "rr_colocated")
# Figure 9 (tokens/s), read from the paper's text and checked against its printed speedups.
PAPER_FIG9 = {
    "qwen2.5-1.5b+glm-z1-9b": {
        "colocated": 27184,
        "disaggregated": 31176,
        "rr_colocated": 25405,
        "pivot": 50077,
    },
    "qwen2.5-7b+qwen3-30b-a3b": {
        "colocated": 11545,
        "disaggregated": 11711,
        "rr_colocated": 14189,
        "pivot": 22822,
    },
    "qwen2.5-32b+qwen3-30b-a3b": {
        "colocated": 9998,
        "disaggregated": 13681,
        "rr_colocated": 11343,
        "pivot": 20503,
    },
    "qwen2.5-72b+qwen3.5-122b-a10b": {
        "colocated": 6915,
        "disaggregated": 7954,
        "rr_colocated": 7530,
        "pivot": 12503,
    },
}
# Figure 11: throughput over disaggregated.
PAPER_FIG11 = {
    "qwen2.5-7b+qwen3-30b-a3b": {
        "static": 1.55,
        "rule_based": 1.31,
        "vanilla": 1.79,
        "vanilla+tm": 1.87,
        "pivot": 1.95,
    },
    "qwen2.5-1.5b+glm-z1-9b": {
        "static": 1.27,
        "rule_based": 1.05,
        "vanilla": 1.43,
        "vanilla+tm": 1.53,
        "pivot": 1.61,
    },
}
# Figure 12 (seconds): inference up ~1 (1.5B) .. ~9 (122B), down < 2; training up 2 .. 8.5, down < 6.
PAPER_FIG12 = (
    "inference up ~1 s (1.5B) .. ~9 s (122B), down < 2 s; training up 2 .. 8.5 s, down < 6 s"
)
# Figure 14: the paper plots throughput and shifts per step for H in 0.01 .. 600; its text says
# throughput is lower with fewer shifts at small H, stable for 60 <= H <= 120, lower again at 600.
H_VALUES = (0.01, 5, 30, 60, 90, 120, 600)


# The runs: a group's preset at a seed, each deployment's allocation (given, the paper's Table 4, or
# searched) and its runs over the seeds, at the nominal cost model or at the band's corners.
def preset(group: str, seed: int):  # noqa: ANN201
    cfg = paper_preset(group)
    cfg.seed = seed
    return cfg


def alloc_name(a: Allocation) -> str:
    return f"T{a.train_devices}" + (f"/R{a.rollout_devices}" if a.rollout_devices else "")


def choose_allocation(
    base,
    name: str,
    args: argparse.Namespace,  # noqa: ANN001
    opts: SimOptions,
    where: str = "",
) -> tuple[Allocation, dict[int, SimResult]]:
    """The allocation of `name` and the runs (by seed) its search already made there (`where`:
    the corner it tunes at, for the printed line)."""
    if name in args.use:
        return args.use[name], {}
    if args.alloc == "table4":
        return table4(base, name), {}
    best, points = search(base, name, opts, tuple(args.search_seeds))
    if len(points) > 1:
        tried = ", ".join(
            f"{alloc_name(p.alloc)}:{p.throughput:,.0f}" + (" (invalid)" if p.error else "")
            for p in points
        )
        print(f"    {where}search {name}: {tried} -> {alloc_name(best)}", flush=True)
    return best, next(p.runs for p in points if p.alloc == best)


def corner_runs(
    base,  # noqa: ANN001
    corner: str,
    nominal: SimOptions,
    args: argparse.Namespace,
    runs: Runs,
) -> dict[str, list[SimResult]]:
    """One corner of the band: every deployment re-tuned on that corner's costs, as a user who
    measured them would tune it (an allocation given by --use or --alloc table4 stays), and
    PivotRL with `--train.devices auto` launched at its nominal slot, sizing itself from what
    it measures (pivot/sim/autosize.py `replay`: at start-up and after step 1)."""
    at = options_at(nominal, corner)
    out = {}
    for name in BASELINES + ("pivot",):
        alloc, done = choose_allocation(base, name, args, at, f"{corner}: ")
        out[name] = seed_runs(base, name, alloc, at, args.band_seeds, done)
    if args.alloc == "search" and "pivot" not in args.use:
        start = runs["pivot"][0]
        resizes, sizings = replay(
            deployment(base, "pivot", start),
            nominal,
            at,
            base.train.resize_gain,
            seeds=tuple(args.search_seeds),
        )
        for sizing in sizings:  # each decision as the run takes it (the gain it needs)
            pick = decide(sizing, base.train.resize_gain)
            moves = f"moves to {label(pick)}" if pick else f"stays at {label(sizing.current)}"
            print(f"    {corner}: auto: {sizing.line()}; {moves}", flush=True)
        with_resizes = dataclasses.replace(at, resizes=resizes)
        out[AUTO] = seed_runs(base, "pivot", start, with_resizes, args.band_seeds)
    return out


def seed_runs(
    base,
    name: str,
    alloc: Allocation,
    opts: SimOptions,
    seeds: list[int],  # noqa: ANN001
    done: dict[int, SimResult] | None = None,
    horizon_s: float | None = None,
) -> list[SimResult]:
    cfg = deployment(base, name, alloc, horizon_s)
    out = []
    for seed in seeds:
        if done and seed in done:
            out.append(done[seed])
            continue
        cfg.seed = seed
        out.append(simulate(cfg, opts))
    return out


def corners(args: argparse.Namespace) -> tuple[str, ...]:
    return CORNERS if args.band else ()


Runs = dict[str, tuple[Allocation, list[SimResult]]]
Band = dict[str, dict[str, list[SimResult]]]
"""corner -> deployment -> the band seeds' runs at that corner (and `AUTO`'s)."""
AUTO = "pivot auto"
"""PivotRL with `--train.devices auto` launched at its nominal slot (a corner's `corner_runs`)."""


# The figures: Figure 9 (deployments x model groups), Figure 11 (ablations), Figure 14 (H sweep) and
# Figure 12's derived shift costs, each beside the paper's numbers, with the lines every figure
# shares (regime heading, bound shares, per-run details, ratios).
def regime(args: argparse.Namespace) -> str:
    """The allocations, the measured window and the seeds, for every figure's heading."""
    how = (
        "Table 4 (paper)"
        if args.alloc == "table4"
        else (
            f"best of a search over pool sizes (same window, seeds {' '.join(map(str, args.search_seeds))})"
        )
    )
    if args.use:
        how += "; given: " + ", ".join(f"{n} {alloc_name(a)}" for n, a in args.use.items())
    w = args.window
    return (
        f"engine {args.engine_profile}; allocations: {how}; measured: {w.describe(args.staleness)}"
        + (" (steady state)" if w.warmup else " (whole run)")
        + f"; seeds {' '.join(map(str, args.seeds))}"
        + (f"; band seeds {' '.join(map(str, args.band_seeds))}" if args.band else "")
    )


def shares(rs: list[SimResult]) -> str:
    """The runs' shares of their own bounds (pivot/sim/report.py `bound_share`), and the bounds'
    kinds (path, work, train)."""
    kinds = sorted({bound_s(r)[1] for r in rs})
    return f"{Spread.of(map(bound_share, rs)).fmt('.0%')} of its own {'/'.join(kinds)} bound"


def run_details(r: SimResult) -> str:
    """The tighter bound and the share of it reached, shifts and churn, and device time by role."""
    bound, kind = bound_s(r)
    return (
        f"bound ({kind}) {r.tokens / bound:9,.0f} reached {bound / r.measured_s:4.0%}  shift-ups/step "
        f"{shift_ups_per_step(r):.1f}  aborts {r.aborts} preempt {r.preemptions}\n"
        f"  {'':14s} busy/idle/shifting: {breakdown(r).line()}"
    )


def ratio(piv: list[SimResult], base: list[SimResult]) -> Spread:
    """PivotRL over a baseline, seed by seed (the same samples)."""
    return Spread.of(p.throughput / b.throughput for p, b in zip(piv, base))


def report_line(
    name: str,
    rs: list[SimResult],
    paper: dict[str, int],
    piv: list[SimResult],
    band: dict[str, dict[str, list[SimResult]]],
) -> None:
    tps = Spread.of(r.throughput for r in rs)
    sp = ""
    if name != "pivot":  # at a corner: PivotRL auto (or at its allocation) over the re-tuned
        sp = f"PivotRL {ratio(piv, rs).fmt('.2f', 'x')} (paper x{paper['pivot'] / paper[name]:.2f})"
        sp += "".join(
            f" {c} {ratio(band[c].get(AUTO, band[c]['pivot']), band[c][name]).fmt('.2f', 'x')}"
            for c in band
        )
    else:
        sp = "".join(
            f" auto at {c} x{ratio(band[c][AUTO], band[c]['pivot']).fmt('.2f')} of tuned"
            for c in band
            if AUTO in band[c]
        )
    print(
        f"  {name:14s} {tps.fmt()} | {paper[name]:7,} | {tps.mean / paper[name]:5.2f}  {sp}  "
        f"bound share {shares(rs)}"
    )
    print(f"  {'':14s} first seed: {run_details(rs[0])}")


def fig9(
    groups: list[str], opts: SimOptions, args: argparse.Namespace
) -> tuple[dict[str, Runs], dict[str, Band]]:
    print(f"\n== Figure 9: end-to-end tokens/s (sim | paper | sim/paper); {regime(args)} ==")
    out, bands = {}, {}
    for g in groups:
        t0 = time.perf_counter()
        base = preset(g, args.seeds[0])
        print(f"{g}: {opts.workload.describe(world_of(base))}", flush=True)
        runs = {}
        for name in BASELINES + ("pivot",):
            alloc, done = choose_allocation(base, name, args, opts)
            runs[name] = (alloc, seed_runs(base, name, alloc, opts, args.seeds, done))
        band = {c: corner_runs(base, c, opts, args, runs) for c in corners(args)}
        out[g], bands[g] = runs, band
        print(
            f"  ({time.perf_counter() - t0:.1f} s wall; allocations "
            + ", ".join(f"{n} {alloc_name(a)}" for n, (a, _) in runs.items())
            + ")"
        )
        for name in BASELINES + ("pivot",):
            report_line(name, runs[name][1], PAPER_FIG9[g], runs["pivot"][1], band)
        for c in band:
            print(
                f"  {c} corner tokens/s: "
                + ", ".join(
                    f"{n} {Spread.of(r.throughput for r in rs).fmt()}" for n, rs in band[c].items()
                )
            )
        sys.stdout.flush()
    return out, bands


def fig11(
    groups: list[str],
    opts: SimOptions,
    args: argparse.Namespace,
    runs: dict[str, Runs],
    bands: dict[str, Band],
) -> None:
    print(
        f"\n== Figure 11: throughput over disaggregated (sim | paper, then the band's corners); "
        f"ablations on PivotRL's training slot; {regime(args)}, first seed =="
    )
    for g in groups:
        if g not in PAPER_FIG11:
            continue
        base = preset(g, args.seeds[0])
        dis = runs[g]["disaggregated"][1][0].throughput
        alloc, piv = runs[g]["pivot"][0], runs[g]["pivot"][1][0]
        print(g)
        for name, paper in PAPER_FIG11[g].items():
            r = piv if name == "pivot" else simulate(deployment(base, name, alloc), opts)
            band = "".join(
                f" {c} "
                + ratio(
                    bands[g][c]["pivot"]
                    if name == "pivot"
                    else seed_runs(base, name, alloc, options_at(opts, c), args.band_seeds),
                    bands[g][c]["disaggregated"],
                ).fmt(".2f", "x")
                for c in bands[g]
            )
            print(
                f"  {name:14s} {r.throughput:9,.0f}  x{r.throughput / dis:.2f} | x{paper:.2f}{band}  "
                f"{run_details(r)}",
                flush=True,
            )


def hsweep(group: str, opts: SimOptions, args: argparse.Namespace, runs: dict[str, Runs]) -> None:
    print(
        f"\n== Figure 14: H sweep on {group} (paper: lower throughput and fewer shifts at small H, stable "
        f"for 60 <= H <= 120, lower again at 600; the band's corners over their own H={H_VALUES[0]}); "
        f"{regime(args)}, first seed =="
    )
    base = preset(group, args.seeds[0])
    alloc = (
        runs[group]["pivot"][0]
        if group in runs
        else choose_allocation(base, "pivot", args, opts)[0]
    )
    ref = None
    refs: dict[str, list[SimResult]] = {}
    for h in H_VALUES:
        r = simulate(deployment(base, "pivot", alloc, horizon_s=h), opts)
        ref = ref or r.throughput
        band = ""
        for c in corners(args):
            rs = seed_runs(base, "pivot", alloc, options_at(opts, c), args.band_seeds, horizon_s=h)
            band += f" {c} {ratio(rs, refs.setdefault(c, rs)).fmt('.2f', 'x')}"
        print(
            f"  H={h:>6}: {r.throughput:9,.0f} tok/s (x{r.throughput / ref:.2f} of H={H_VALUES[0]}{band})  "
            f"{run_details(r)}",
            flush=True,
        )


def shift_costs(groups: list[str], opts: SimOptions, seed: int) -> None:
    print(
        f"\n== Figure 12: derived shift costs on {opts.hardware.name}, engine {opts.engine} "
        f"(paper: {PAPER_FIG12}) =="
    )
    kv = "engine.kv_capacity_tokens" if opts.kv_from_engine else "all memory the weights leave"
    print(f"  replica KV: {kv}")
    for g in groups:
        hw = with_engine(opts.hardware, opts.engine)
        _, costs = build_cluster(preset(g, seed), hw, opts.kv_from_engine)
        shifts = " | ".join(
            f"{role} up {costs.shift_s(role, True):.1f} down {costs.shift_s(role, False):.1f}"
            for role in ("rollout", "reward", "train")
        )
        print(f"  {g}: {shifts}")
        c = costs.roles
        for role in ("rollout", "reward"):
            m = c[role].throughput
            print(
                f"     {role}: A={m.A:.2e} B={m.B:.2e} C={m.C:.2e} D={m.D:.2e} kv={c[role].kv_capacity:,} tokens "
                f"(T at 64 seqs x 4K: {m.throughput(64, 64 * 4096):,.0f} tok/s)"
            )


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
