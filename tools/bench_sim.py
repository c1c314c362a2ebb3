"""Simulated Figure 9 (deployments x model groups), Figure 11 (ablations), Figure 14 (H sweep),
each beside the paper's numbers, plus a Figure 10 style timeline PNG.

    python tools/bench_sim.py                                  # Figure 9, Table 4 allocations
    python tools/bench_sim.py --search                         # tune baselines by grid search first
    python tools/bench_sim.py --ablations --hsweep --timeline runs/sim/timeline.png
    python tools/bench_sim.py --groups qwen2.5-7b+qwen3-30b-a3b --hardware h200

Every simulated number is printed as tokens/s and as a ratio: PivotRL over each baseline (the
paper's speedups), sim/paper for the absolute values. Runs are deterministic (--seed).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from configs.presets import get_preset  # noqa: E402
from pivot.sim import HARDWARE, SimOptions, simulate  # noqa: E402
from pivot.sim.deploy import deployment, search, table4  # noqa: E402
from pivot.sim.layout import build_layout  # noqa: E402
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
H_VALUES = (0.01, 5, 30, 60, 90, 120, 600)
SEED = 0


def preset(group: str):  # noqa: ANN201
    cfg = get_preset(group)
    cfg.seed = SEED
    return cfg


def fig9(groups: list[str], opts: SimOptions, do_search: bool, search_steps: int) -> dict:
    print("\n== Figure 9: end-to-end tokens/s (sim | paper | sim/paper); speedup of PivotRL over each ==")
    out = {}
    for g in groups:
        t0 = time.perf_counter()
        base = preset(g)
        res = {}
        for name in BASELINES + ("pivot",):
            alloc = table4(base, name)
            if do_search and name in ("disaggregated", "rr_colocated"):
                alloc, points = search(base, name, SimOptions(**{**opts.__dict__, "steps": search_steps}))
                tried = ", ".join(f"T{p.alloc.train_devices}/R{p.alloc.rollout_devices}:{p.throughput:,.0f}"
                                  + (" (invalid)" if p.error else "") for p in points)
                print(f"  search {g} {name}: {tried} -> best T{alloc.train_devices}/R{alloc.rollout_devices}")
            res[name] = simulate(deployment(base, name, alloc), opts)
        out[g] = res
        p = PAPER_FIG9[g]
        piv = res["pivot"].throughput
        print(f"{g}  ({time.perf_counter() - t0:.1f} s wall)")
        for name in BASELINES + ("pivot",):
            r = res[name]
            sp = f"PivotRL x{piv / r.throughput:.2f} (paper x{p['pivot'] / p[name]:.2f})" if name != "pivot" else ""
            print(f"  {name:14s} {r.throughput:9,.0f} | {p[name]:7,} | {r.throughput / p[name]:5.2f}   {sp}")
    return out


def fig11(groups: list[str], opts: SimOptions, fig9_res: dict) -> None:
    print("\n== Figure 11: throughput over disaggregated (sim | paper) ==")
    for g in groups:
        if g not in PAPER_FIG11:
            continue
        base = preset(g)
        dis = fig9_res[g]["disaggregated"].throughput if g in fig9_res else \
            simulate(deployment(base, "disaggregated", table4(base, "disaggregated")), opts).throughput
        print(g)
        for name, paper in PAPER_FIG11[g].items():
            r = fig9_res[g]["pivot"] if name == "pivot" and g in fig9_res else simulate(deployment(base, name), opts)
            print(f"  {name:12s} x{r.throughput / dis:.2f} | x{paper:.2f}   ({r.num_plans} shifts)")


def hsweep(group: str, opts: SimOptions) -> None:
    print(f"\n== Figure 14: H sweep on {group} (paper: stable between 60 and 120, fewer shifts and lower "
          "throughput at small H, too many shifts at very large H) ==")
    base = preset(group)
    ref = None
    for h in H_VALUES:
        r = simulate(deployment(base, "pivot", horizon_s=h), opts)
        ref = ref or r.throughput
        print(f"  H={h:>6}: {r.throughput:9,.0f} tok/s (x{r.throughput / ref:.2f} of H={H_VALUES[0]}), "
              f"{r.num_plans / r.steps:.1f} shifts per step")


def shift_costs(groups: list[str], hw_name: str) -> None:
    print(f"\n== Figure 12: derived shift costs on {hw_name} (paper: {PAPER_FIG12}) ==")
    hw = HARDWARE[hw_name]
    for g in groups:
        lay = build_layout(preset(g), hw)
        c = lay.costs
        print(f"  {g}: rollout up {c['rollout'].up_s:.1f} down {c['rollout'].down_s:.1f} | reward up {c['reward'].up_s:.1f} "
              f"down {c['reward'].down_s:.1f} | train up {lay.train_up_s:.1f} down {lay.train_down_s:.1f}")
        for role in ("rollout", "reward"):
            m = c[role].throughput
            print(f"     {role}: A={m.A:.2e} B={m.B:.2e} C={m.C:.2e} D={m.D:.2e} kv={c[role].kv_capacity:,} tokens "
                  f"(T at 64 seqs x 4K: {m.throughput(64, 64 * 4096):,.0f} tok/s)")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", nargs="+", default=list(GROUPS))
    ap.add_argument("--hardware", default="h20", choices=sorted(HARDWARE))
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--search", action="store_true", help="tune disaggregated and rr_colocated allocations by grid search")
    ap.add_argument("--search-steps", type=int, default=3)
    ap.add_argument("--ablations", action="store_true")
    ap.add_argument("--hsweep", default="", help="model group of the H sweep (empty: skip)")
    ap.add_argument("--timeline", default="", help="PNG path: disaggregated vs pivot timeline of the first group")
    args = ap.parse_args()
    opts = SimOptions(hardware=HARDWARE[args.hardware], steps=args.steps)
    t0 = time.perf_counter()
    shift_costs(args.groups, args.hardware)
    global SEED
    SEED = args.seed
    res = fig9(args.groups, opts, args.search, args.search_steps)
    if args.ablations:
        fig11([g for g in args.groups if g in PAPER_FIG11], opts, res)
    if args.hsweep:
        hsweep(args.hsweep, opts)
    if args.timeline:
        g = args.groups[0]
        path = render_timeline({"Disaggregated": res[g]["disaggregated"], "PivotRL": res[g]["pivot"]}, args.timeline)
        print(f"\ntimeline: {path}")
    print(f"\ntotal wall {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
