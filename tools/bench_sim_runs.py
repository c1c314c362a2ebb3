"""tools/bench_sim.py's runs: a group's preset at a seed, each deployment's allocation (given,
the paper's Table 4, or searched) and its runs over the seeds, at the nominal cost model or at
the band's corners."""

from __future__ import annotations

import argparse

from configs.presets import paper_preset
from pivot.sim import SimOptions, SimResult, simulate
from pivot.sim.band import CORNERS
from pivot.sim.deploy import Allocation, deployment, search, table4


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
) -> tuple[Allocation, dict[int, SimResult]]:
    """The allocation of `name` and the runs (by seed) its search already made there."""
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
        print(f"    search {name}: {tried} -> {alloc_name(best)}", flush=True)
    return best, next(p.runs for p in points if p.alloc == best)


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
"""corner -> deployment -> the band seeds' runs at that corner."""
