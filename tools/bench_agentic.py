"""PivotRL on an agentic workload (multi-turn rollouts with tool calls, pivot/sim/workload.py
`Agentic`) against tuned baselines, beside the same comparison on the single-answer workload of
the same prompts, seeds and regime: is shifting worth more when tools leave rollout devices idle?

    python tools/bench_agentic.py                           # 7B + Qwen3-30B-A3B, H20 and H200, seeds 0 1 2
    python tools/bench_agentic.py --hardware h200 --seeds 0  # one hardware, one seed
    python tools/bench_agentic.py --no-single               # the agentic workload only
    python tools/bench_agentic.py --latency-scale 10        # tools 10x slower (median 10 s)

It reuses tools/bench_sim.py's runs: every deployment tuned by the same search over its pools
(`--alloc search`, on the first seed; `--alloc table4` or `--use NAME=T[/R]` to fix it) and each
seed run on the same samples. The default regime is smaller than bench_sim's headline (32
prompts x 16 per step, steps 3..5 measured after 3 warm-up steps: one whole period at staleness
2) so a run takes minutes on two cores; `--prompts`, `--steps`, `--warmup` change it. Every
figure is a ratio against a run of the same invocation: PivotRL over each tuned baseline (mean
and min-max over the seeds, seed by seed), the agentic lead over the single-answer lead, and
each role's device time (busy/idle/shifting, first seed) as shares of the cluster's.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_sim import (  # noqa: E402  (the headline's runs, reused)
    alloc_name,
    choose_allocation,
    parse_use,
    preset,
    ratio,
    regime,
    run_details,
    seed_runs,
    window_of,
)

from pivot.sim import HARDWARE, SimOptions, SimResult, Workload  # noqa: E402
from pivot.sim.deploy import Allocation, world_of  # noqa: E402
from pivot.sim.engine_profile import ENGINE_PROFILES  # noqa: E402
from pivot.sim.window import Spread  # noqa: E402
from pivot.sim.workload import Agentic  # noqa: E402

GROUP = "qwen2.5-7b+qwen3-30b-a3b"
Runs = dict[str, tuple[Allocation, list[SimResult]]]


def run_workload(base, opts: SimOptions, names: list[str], args: argparse.Namespace) -> Runs:  # noqa: ANN001
    """Each deployment of `names` tuned on `opts` and run over the seeds."""
    out = {}
    for name in names:
        alloc, done = choose_allocation(base, name, args, opts)
        out[name] = (alloc, seed_runs(base, name, alloc, opts, args.seeds, done))
    return out


def leads(runs: Runs, baselines: list[str]) -> dict[str, Spread]:
    """PivotRL over each baseline, seed by seed."""
    return {b: ratio(runs["pivot"][1], runs[b][1]) for b in baselines}


def tool_line(r: SimResult) -> str:
    """What the tools did in a run (all steps it ran): calls per episode, host seconds per episode,
    and how often an episode's next turn found its context still cached where it landed."""
    episodes = sum(len(ss) for ss in r.samples.values())
    hits = r.resume_hits / r.resumed_turns if r.resumed_turns else 0.0
    return (
        f"tool calls/episode {r.tool_calls / episodes:.2f}, tool s/episode "
        f"{r.tool_s / episodes:.2f}, next turn on a cached context {hits:.0%}, re-prefilled "
        f"tokens per prefilled {r.reprefill_tokens / max(r.prefill_tokens, 1):.0%}"
    )


def report(label: str, runs: Runs, baselines: list[str]) -> dict[str, Spread]:
    allocs = ", ".join(f"{n} {alloc_name(a)}" for n, (a, _) in runs.items())
    lead = leads(runs, baselines)
    print(
        f"  {label}: PivotRL over "
        + ", ".join(f"{b} {lead[b].fmt('.2f', 'x')}" for b in baselines)
        + f"  (tuned: {allocs})",
        flush=True,
    )
    for name, (_, rs) in runs.items():
        print(f"    {name:14s} first seed: {run_details(rs[0])}")
        if rs[0].tool_calls:
            print(f"    {'':14s} {tool_line(rs[0])}")
    return lead


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--group", default=GROUP, help="model group (configs/presets.py)")
    ap.add_argument("--hardware", nargs="+", default=["h20", "h200"], choices=sorted(HARDWARE))
    ap.add_argument("--engine-profile", default="sglang", choices=list(ENGINE_PROFILES))
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--search-seeds", type=int, nargs="+", default=None)
    ap.add_argument("--prompts", type=int, default=32, help="prompts per step (default 32)")
    ap.add_argument("--group-size", type=int, default=16)
    ap.add_argument("--steps", type=int, default=6, help="steps to run (default 6)")
    ap.add_argument("--warmup", type=int, default=3, help="warm-up steps (default 3)")
    ap.add_argument("--alloc", default="search", choices=("search", "table4"))
    ap.add_argument("--use", nargs="+", default=[], metavar="NAME=T[/R]")
    ap.add_argument(
        "--baselines",
        nargs="+",
        default=["disaggregated", "colocated"],
        choices=("disaggregated", "colocated", "rr_colocated"),
    )
    ap.add_argument(
        "--no-single", action="store_true", help="skip the single-answer reference workload"
    )
    ap.add_argument(
        "--latency-scale",
        type=float,
        default=1.0,
        help="multiply the tool latency's median and cap (sensitivity: longer tools)",
    )
    args = ap.parse_args()
    args.use = dict(parse_use(u) for u in args.use)
    args.search_seeds = args.search_seeds or args.seeds[:1]
    args.band, args.band_seeds = False, []
    args.staleness = preset(args.group, 0).train.staleness
    args.window = window_of(args)
    names = args.baselines + ["pivot"]
    single = Workload(prompts_per_step=args.prompts, group_size=args.group_size)
    agentic = Agentic()
    if args.latency_scale != 1.0:
        t, k = agentic.tool_latency, args.latency_scale
        latency = dataclasses.replace(t, median=t.median * k, cap=t.cap * k)
        agentic = dataclasses.replace(agentic, tool_latency=latency)
    workloads = {"agentic": dataclasses.replace(single, agentic=agentic)}
    if not args.no_single:
        workloads = {"single-answer": single, **workloads}
    print(f"== agentic workload: PivotRL over tuned {', '.join(args.baselines)}; {regime(args)} ==")
    t0 = time.perf_counter()
    for hw in args.hardware:
        base = preset(args.group, args.seeds[0])
        print(f"{args.group}, {hw.upper()}: {workloads['agentic'].describe(world_of(base))}")
        found = {}
        for label, workload in workloads.items():
            opts = SimOptions(
                hardware=HARDWARE[hw],
                engine=args.engine_profile,
                steps=args.window.steps,
                workload=workload,
                warmup_steps=args.window.warmup,
            )
            found[label] = report(label, run_workload(base, opts, names, args), args.baselines)
        if "single-answer" in found:
            a, s = found["agentic"], found["single-answer"]
            print(
                "  agentic lead over single-answer lead: "
                + ", ".join(f"{b} x{a[b].mean / s[b].mean:.2f}" for b in args.baselines)
            )
        print(f"  ({time.perf_counter() - t0:.0f} s wall so far)", flush=True)


if __name__ == "__main__":
    main()
