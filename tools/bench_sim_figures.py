"""tools/bench_sim.py's figures: Figure 9 (deployments x model groups), Figure 11 (ablations),
Figure 14 (H sweep) and Figure 12's derived shift costs, each beside the paper's numbers, with
the lines every figure shares (regime heading, bound shares, per-run details, ratios)."""

from __future__ import annotations

import argparse
import sys
import time

from bench_sim_paper import BASELINES, H_VALUES, PAPER_FIG9, PAPER_FIG11, PAPER_FIG12
from bench_sim_runs import Band, Runs, alloc_name, choose_allocation, corners, preset, seed_runs

from pivot.sim import SimOptions, SimResult, simulate
from pivot.sim.band import options_at
from pivot.sim.costs import build_cluster
from pivot.sim.deploy import deployment, world_of
from pivot.sim.engine_profile import with_engine
from pivot.sim.report import bound_s, bound_share, breakdown, shift_ups_per_step
from pivot.sim.window import Spread


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
    if name != "pivot":
        sp = f"PivotRL {ratio(piv, rs).fmt('.2f', 'x')} (paper x{paper['pivot'] / paper[name]:.2f})"
        sp += "".join(
            f" {c} {ratio(band[c]['pivot'], band[c][name]).fmt('.2f', 'x')}" for c in band
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
        band = {
            c: {
                n: seed_runs(base, n, a, options_at(opts, c), args.band_seeds)
                for n, (a, _) in runs.items()
            }
            for c in corners(args)
        }
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
        c = costs.roles
        print(
            f"  {g}: rollout up {c['rollout'].up_s:.1f} down {c['rollout'].down_s:.1f} | reward up {c['reward'].up_s:.1f} "  # noqa: E501 (one table row, easier read whole)
            f"down {c['reward'].down_s:.1f} | train up {costs.train_up_s:.1f} down {costs.train_down_s:.1f}"
        )
        for role in ("rollout", "reward"):
            m = c[role].throughput
            print(
                f"     {role}: A={m.A:.2e} B={m.B:.2e} C={m.C:.2e} D={m.D:.2e} kv={c[role].kv_capacity:,} tokens "
                f"(T at 64 seqs x 4K: {m.throughput(64, 64 * 4096):,.0f} tok/s)"
            )
