"""Simulated Figure 9 (deployments x model groups), Figure 11 (ablations), Figure 14 (H sweep),
each beside the paper's numbers, plus a Figure 10 style timeline PNG.

    python tools/bench_sim.py                                  # Figure 9, every deployment tuned
    python tools/bench_sim.py --alloc table4                   # the paper's Table 4 allocations
    python tools/bench_sim.py --steps 7 --warmup 3             # steady state: steps 3..6 measured
    python tools/bench_sim.py --ablations --hsweep qwen2.5-7b+qwen3-30b-a3b --timeline runs/sim/timeline.png
    python tools/bench_sim.py --groups qwen2.5-7b+qwen3-30b-a3b --hardware h200 --prompts 64

Every run prints tokens/s and ratios: PivotRL over each baseline (the paper's speedups), sim/paper
for the absolute values, the critical-path bound (the throughput no deployment with that
staleness and training pool can beat, pivot/sim/report.py) and the share of it reached, and each
role's device time as busy/idle/shifting. Runs are deterministic (--seed).
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from configs.presets import get_preset  # noqa: E402
from pivot.sim import HARDWARE, SimOptions, SimResult, Workload, simulate  # noqa: E402
from pivot.sim.costs import build_cluster  # noqa: E402
from pivot.sim.deploy import Allocation, deployment, search, table4, world_of  # noqa: E402
from pivot.sim.report import breakdown, critical_path_s, shift_ups_per_step  # noqa: E402
from pivot.sim.timeline import render_timeline  # noqa: E402

GROUPS = ("qwen2.5-1.5b+glm-z1-9b", "qwen2.5-7b+qwen3-30b-a3b", "qwen2.5-32b+qwen3-30b-a3b", "qwen2.5-72b+qwen3.5-122b-a10b")
BASELINES = ("colocated", "disaggregated", "rr_colocated")
# Figure 9 (tokens/s), read from the paper's text and checked against its printed speedups.
PAPER_FIG9 = {
    "qwen2.5-1.5b+glm-z1-9b": {"colocated": 27184, "disaggregated": 31176, "rr_colocated": 25405, "pivot": 50077},
    "qwen2.5-7b+qwen3-30b-a3b": {"colocated": 11545, "disaggregated": 11711, "rr_colocated": 14189, "pivot": 22822},
    "qwen2.5-32b+qwen3-30b-a3b": {"colocated": 9998, "disaggregated": 13681, "rr_colocated": 11343, "pivot": 20503},
    "qwen2.5-72b+qwen3.5-122b-a10b": {"colocated": 6915, "disaggregated": 7954, "rr_colocated": 7530, "pivot": 12503},
}
# Figure 11: throughput over disaggregated.
PAPER_FIG11 = {
    "qwen2.5-7b+qwen3-30b-a3b": {"static": 1.55, "rule_based": 1.31, "vanilla": 1.79, "vanilla+tm": 1.87, "pivot": 1.95},
    "qwen2.5-1.5b+glm-z1-9b": {"static": 1.27, "rule_based": 1.05, "vanilla": 1.43, "vanilla+tm": 1.53, "pivot": 1.61},
}
# Figure 12 (seconds): inference up ~1 (1.5B) .. ~9 (122B), down < 2; training up 2 .. 8.5, down < 6.
PAPER_FIG12 = "inference up ~1 s (1.5B) .. ~9 s (122B), down < 2 s; training up 2 .. 8.5 s, down < 6 s"
# Figure 14: the paper plots throughput and shifts per step for H in 0.01 .. 600; its text says
# throughput is lower with fewer shifts at small H, stable for 60 <= H <= 120, lower again at 600.
H_VALUES = (0.01, 5, 30, 60, 90, 120, 600)


def preset(group: str, seed: int):  # noqa: ANN201
    cfg = get_preset(group)
    cfg.seed = seed
    return cfg


def _alloc_name(a: Allocation) -> str:
    return f"T{a.train_devices}" + (f"/R{a.rollout_devices}" if a.rollout_devices else "")


def choose_allocation(base, name: str, args: argparse.Namespace, opts: SimOptions) -> Allocation:  # noqa: ANN001
    if args.alloc == "table4":
        return table4(base, name)
    best, points = search(base, name, dataclasses.replace(opts, steps=args.search_steps))
    if len(points) > 1:
        tried = ", ".join(f"{_alloc_name(p.alloc)}:{p.throughput:,.0f}" + (" (invalid)" if p.error else "") for p in points)
        print(f"    search {name}: {tried} -> {_alloc_name(best)}")
    return best


def regime(args: argparse.Namespace) -> str:
    """The allocations and the measured window, for every figure's heading."""
    how = "Table 4 (paper)" if args.alloc == "table4" else f"best of a search over pool sizes ({args.search_steps} steps each)"
    return f"allocations: {how}; measured: steps {args.warmup}..{args.steps - 1}" + (
        " (steady state)" if args.warmup else " (whole run)")


def run_details(r: SimResult) -> str:
    """Share of the critical-path bound reached, shifts and churn, and device time by role."""
    bound = critical_path_s(r)
    return (f"bound {r.tokens / bound:9,.0f} reached {bound / r.measured_s:4.0%}  shift-ups/step "
            f"{shift_ups_per_step(r):.1f}  aborts {r.aborts} preempt {r.preemptions}\n"
            f"  {'':14s} busy/idle/shifting: {breakdown(r).line()}")


def report_line(name: str, r: SimResult, paper: dict[str, float], piv: float) -> None:
    sp = f"PivotRL x{piv / r.throughput:.2f} (paper x{paper['pivot'] / paper[name]:.2f})" if name != "pivot" else " " * 29
    print(f"  {name:14s} {r.throughput:9,.0f} | {paper[name]:7,} | {r.throughput / paper[name]:5.2f}  {sp}  {run_details(r)}")


def fig9(groups: list[str], opts: SimOptions, args: argparse.Namespace) -> dict[str, dict[str, tuple[Allocation, SimResult]]]:
    print(f"\n== Figure 9: end-to-end tokens/s (sim | paper | sim/paper); {regime(args)} ==")
    out = {}
    for g in groups:
        t0 = time.perf_counter()
        base = preset(g, args.seed)
        print(f"{g}: {opts.workload.describe(world_of(base))}")
        runs = {}
        for name in BASELINES + ("pivot",):
            alloc = choose_allocation(base, name, args, opts)
            runs[name] = (alloc, simulate(deployment(base, name, alloc), opts))
        out[g] = runs
        piv = runs["pivot"][1].throughput
        print(f"  ({time.perf_counter() - t0:.1f} s wall; allocations "
              + ", ".join(f"{n} {_alloc_name(a)}" for n, (a, _) in runs.items()) + ")")
        for name in BASELINES + ("pivot",):
            report_line(name, runs[name][1], PAPER_FIG9[g], piv)
    return out


def fig11(groups: list[str], opts: SimOptions, args: argparse.Namespace, runs: dict) -> None:
    print(f"\n== Figure 11: throughput over disaggregated (sim | paper); ablations on PivotRL's training slot; "
          f"{regime(args)} ==")
    for g in groups:
        if g not in PAPER_FIG11:
            continue
        base = preset(g, args.seed)
        dis = runs[g]["disaggregated"][1].throughput
        alloc, piv = runs[g]["pivot"]
        print(g)
        for name, paper in PAPER_FIG11[g].items():
            r = piv if name == "pivot" else simulate(deployment(base, name, alloc), opts)
            print(f"  {name:14s} {r.throughput:9,.0f}  x{r.throughput / dis:.2f} | x{paper:.2f}  {run_details(r)}")


def hsweep(group: str, opts: SimOptions, args: argparse.Namespace, runs: dict) -> None:
    print(f"\n== Figure 14: H sweep on {group} (paper: lower throughput and fewer shifts at small H, stable "
          f"for 60 <= H <= 120, lower again at 600); {regime(args)} ==")
    base = preset(group, args.seed)
    alloc = runs[group]["pivot"][0] if group in runs else choose_allocation(base, "pivot", args, opts)
    ref = None
    for h in H_VALUES:
        r = simulate(deployment(base, "pivot", alloc, horizon_s=h), opts)
        ref = ref or r.throughput
        print(f"  H={h:>6}: {r.throughput:9,.0f} tok/s (x{r.throughput / ref:.2f} of H={H_VALUES[0]})  {run_details(r)}")


def shift_costs(groups: list[str], opts: SimOptions, seed: int) -> None:
    print(f"\n== Figure 12: derived shift costs on {opts.hardware.name} (paper: {PAPER_FIG12}) ==")
    kv = "engine.kv_capacity_tokens" if opts.kv_from_engine else "all memory the weights leave"
    print(f"  replica KV: {kv}")
    for g in groups:
        _, costs = build_cluster(preset(g, seed), opts.hardware, opts.kv_from_engine)
        c = costs.roles
        print(f"  {g}: rollout up {c['rollout'].up_s:.1f} down {c['rollout'].down_s:.1f} | reward up {c['reward'].up_s:.1f} "
              f"down {c['reward'].down_s:.1f} | train up {costs.train_up_s:.1f} down {costs.train_down_s:.1f}")
        for role in ("rollout", "reward"):
            m = c[role].throughput
            print(f"     {role}: A={m.A:.2e} B={m.B:.2e} C={m.C:.2e} D={m.D:.2e} kv={c[role].kv_capacity:,} tokens "
                  f"(T at 64 seqs x 4K: {m.throughput(64, 64 * 4096):,.0f} tok/s)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", nargs="+", default=list(GROUPS))
    ap.add_argument("--hardware", default="h20", choices=sorted(HARDWARE))
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=0,
                    help="steps left out of the throughput (steady state: prompts keep coming past the last step)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--prompts", type=int, default=None, help="prompts per step (default: 4 per device, DAPO's ratio)")
    ap.add_argument("--group-size", type=int, default=16)
    ap.add_argument("--alloc", default="search", choices=("search", "table4"),
                    help="search: tune every deployment's pools alike; table4: the paper's allocations")
    ap.add_argument("--search-steps", type=int, default=None,
                    help="steps of each search run (default --steps: fewer steps release every step at once and "
                    "favour other allocations)")
    ap.add_argument("--kv", default="engine", choices=("engine", "device"),
                    help="replica KV: the engine config's kv_capacity_tokens (as the runtime) or all free device memory")
    ap.add_argument("--ablations", action="store_true")
    ap.add_argument("--hsweep", default="", help="model group of the H sweep (empty: skip)")
    ap.add_argument("--timeline", default="", help="PNG path: disaggregated vs pivot timeline of the first group")
    args = ap.parse_args()
    args.search_steps = args.search_steps or args.steps
    workload = Workload(prompts_per_step=args.prompts, group_size=args.group_size)
    opts = SimOptions(hardware=HARDWARE[args.hardware], steps=args.steps, workload=workload,
                      kv_from_engine=args.kv == "engine", warmup_steps=args.warmup)
    t0 = time.perf_counter()
    shift_costs(args.groups, opts, args.seed)
    runs = fig9(args.groups, opts, args)
    if args.ablations:
        fig11(args.groups, opts, args, runs)
    if args.hsweep:
        hsweep(args.hsweep, opts, args, runs)
    if args.timeline:
        g = args.groups[0]
        path = render_timeline({"Disaggregated": runs[g]["disaggregated"][1], "PivotRL": runs[g]["pivot"][1]}, args.timeline)
        print(f"\ntimeline: {path}")
    print(f"\ntotal wall {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
