"""Named deployments of one model group, and the search that tunes each baseline's allocation.

`deployment(base, name)` turns a preset into one of the compared runs:
  colocated, disaggregated, rr_colocated            the baselines (paper §8.2)
  pivot, static, rule_based                          shift strategies (Figure 11, top)
  vanilla, vanilla+tm                                 components (Figure 11, bottom): vanilla =
                                                      no throughput model, no migration;
                                                      +tm = the throughput model, no migration
Every deployment takes an allocation (`train_devices`: the training pool, or Pivot's training
slot; `rollout_devices`: disaggregated's rollout pool). The paper tunes each system to its best
configuration; `search` does the same for every deployment, Pivot included, over one grid and
returns every point tried; `table4` is the paper's Appendix E allocation.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from pivot.config import PivotConfig
from pivot.dist import pool_sizes
from pivot.plan.modes import split_reserves
from pivot.sim.simulator import SimOptions, SimResult, simulate

DEPLOYMENTS = (
    "colocated",
    "disaggregated",
    "rr_colocated",
    "pivot",
    "static",
    "rule_based",
    "vanilla",
    "vanilla+tm",
)


@dataclass(frozen=True)
class Allocation:
    train_devices: int
    rollout_devices: int = 0
    """Disaggregated: devices of the rollout pool (the reward pool takes the rest). Pivot: the
    same split as reserves (`planner.reserve_rollout`, `reserve_reward`: the planner lends only
    the idle trainer's devices); 0: none, the paper's planner."""


def world_of(cfg: PivotConfig) -> int:
    return cfg.cluster.nnodes * cfg.cluster.devices_per_node


def deployment(
    base: PivotConfig, name: str, alloc: Allocation | None = None, horizon_s: float | None = None
) -> PivotConfig:
    if name not in DEPLOYMENTS:
        raise ValueError(f"deployment {name!r}: expected one of {', '.join(DEPLOYMENTS)}")
    cfg = copy.deepcopy(base)
    mode = name if name in ("colocated", "disaggregated", "rr_colocated") else "pivot"
    cfg.cluster.mode = mode  # type: ignore[assignment]  # one of DEPLOYMENTS: a Mode
    cfg.planner.strategy = name if name in ("static", "rule_based") else "pivot"  # type: ignore[assignment]
    cfg.planner.throughput_model = name != "vanilla"
    cfg.planner.migration = name not in ("vanilla", "vanilla+tm")
    if horizon_s is not None:
        cfg.planner.horizon_s = horizon_s
    if alloc is not None:
        cfg.train.devices = alloc.train_devices
        inference = world_of(cfg) - alloc.train_devices
        split = mode == "disaggregated" or (name == "pivot" and alloc.rollout_devices > 0)
        if split and not 0 < alloc.rollout_devices < inference:
            raise ValueError(
                f"rollout_devices={alloc.rollout_devices}: need 0 < it < {inference} inference devices"
            )
        if mode == "disaggregated":
            cfg.rollout.replicas = alloc.rollout_devices // cfg.rollout.tp
            cfg.reward.replicas = (inference - alloc.rollout_devices) // cfg.reward.tp
        elif name == "pivot":  # the allocation's split, or none: not the base config's
            cfg.planner.reserve_rollout, cfg.planner.reserve_reward = split_reserves(
                world_of(cfg), alloc.train_devices, alloc.rollout_devices
            )
    return cfg


def table4(base: PivotConfig, name: str) -> Allocation:
    """The paper's Table 4 allocation: training pool as the preset; disaggregated inference split
    as the paper (1.5B: 8/8, 7B: 12/12, 32B: 16/16, 72B: 32/32, i.e. evenly)."""
    train = base.train.pool
    return Allocation(train, (world_of(base) - train) // 2 if name == "disaggregated" else 0)


def training_pools(base: PivotConfig) -> list[int]:
    """Every training pool (Pivot's training slot) a deployment may take: at least one rollout
    replica's worth of devices, less than the cluster, and whole nodes or part of one."""
    return pool_sizes(world_of(base), base.cluster.devices_per_node, base.rollout.tp)


def rollout_split(base: PivotConfig, train: int, fraction: float) -> int:
    """Disaggregated's rollout pool (or Pivot's rollout reserve): `fraction` of the inference
    devices, in whole replicas."""
    unit = max(base.rollout.tp, base.reward.tp)
    return int(round((world_of(base) - train) * fraction / unit)) * unit


def _allocations_at(base: PivotConfig, name: str, train: int) -> list[Allocation]:
    if name != "disaggregated":
        return [Allocation(train)]
    out = []
    for frac in (1 / 3, 1 / 2, 2 / 3):
        ro = rollout_split(base, train, frac)
        if 0 < ro < world_of(base) - train and Allocation(train, ro) not in out:
            out.append(Allocation(train, ro))
    return out


def candidate_allocations(base: PivotConfig, name: str) -> list[Allocation]:
    """The grid the search starts from, the same for every deployment: training pool (Pivot's
    training slot) 1/8, 1/4, 1/2 of the cluster and the preset's; for disaggregated, rollout 1/3,
    1/2, 2/3 of the rest (whole replicas). Colocated has nothing to tune (every role gets every
    device)."""
    if name == "colocated":
        return [table4(base, name)]
    world, valid = world_of(base), set(training_pools(base))
    trains = sorted({base.train.pool, world // 8, world // 4, world // 2} & valid)
    return [a for t in trains for a in _allocations_at(base, name, t)]


def _nearest(values: list[int], target: float) -> int | None:
    return min(values, key=lambda v: abs(v - target)) if values else None


def beyond_edges(
    base: PivotConfig, name: str, best: Allocation, tried: list[Allocation]
) -> list[Allocation]:
    """Where the best point tried sits on the edge of what was tried, the allocations one step
    past that edge (training pool about half / halfway to the whole cluster; disaggregated's
    rollout pool about half / halfway to all the inference devices): a baseline whose optimum
    lies outside the starting grid is not left there. Empty once the best is inside."""
    out: list[Allocation] = []
    trains = {a.train_devices for a in tried}
    pools = training_pools(base)
    if best.train_devices == min(trains):
        t = _nearest([v for v in pools if v < best.train_devices], best.train_devices / 2)
        out += _allocations_at(base, name, t) if t is not None else []
    if best.train_devices == max(trains):
        world = world_of(base)
        t = _nearest([v for v in pools if v > best.train_devices], (best.train_devices + world) / 2)
        out += _allocations_at(base, name, t) if t is not None else []
    if name == "disaggregated":
        unit = max(base.rollout.tp, base.reward.tp)
        inference = world_of(base) - best.train_devices
        splits = [a.rollout_devices for a in tried if a.train_devices == best.train_devices]
        steps = range(unit, inference, unit)
        if best.rollout_devices == min(splits):
            ro = _nearest([v for v in steps if v < best.rollout_devices], best.rollout_devices / 2)
            out += [Allocation(best.train_devices, ro)] if ro is not None else []
        if best.rollout_devices == max(splits):
            target = (best.rollout_devices + inference) / 2
            ro = _nearest([v for v in steps if v > best.rollout_devices], target)
            out += [Allocation(best.train_devices, ro)] if ro is not None else []
    return [a for a in dict.fromkeys(out) if a not in tried]


@dataclass(frozen=True)
class SearchPoint:
    alloc: Allocation
    throughput: float
    error: str = ""
    runs: dict[int, SimResult] = field(default_factory=dict, compare=False, repr=False)
    """The point's run of each seed (callers reuse them instead of simulating again)."""


def search(
    base: PivotConfig,
    name: str,
    opts: SimOptions,
    seeds: tuple[int, ...] | None = None,
    max_rounds: int = 6,
) -> tuple[Allocation, list[SearchPoint]]:
    """Simulate every candidate allocation of a deployment on `opts` (its measured window: tune
    on the window the figures are measured on) and each of `seeds` (default: the base's), then
    step past the grid's edge while the best sits on it (at most `max_rounds` steps); the best by
    mean throughput and all points tried."""
    points = [
        evaluate(base, name, alloc, opts, seeds) for alloc in candidate_allocations(base, name)
    ]
    best = max(points, key=lambda p: p.throughput)
    for _ in range(max_rounds if name != "colocated" else 0):
        more = beyond_edges(base, name, best.alloc, [p.alloc for p in points])
        if not more:
            break
        points += [evaluate(base, name, alloc, opts, seeds) for alloc in more]
        best = max(points, key=lambda p: p.throughput)
    return best.alloc, points


def evaluate(
    base: PivotConfig,
    name: str,
    alloc: Allocation,
    opts: SimOptions,
    seeds: tuple[int, ...] | None,
) -> SearchPoint:
    try:
        cfg = deployment(base, name, alloc)
        runs = {}
        for seed in seeds or (base.seed,):
            cfg.seed = seed
            runs[seed] = simulate(cfg, opts)
    except ValueError as e:  # an impossible allocation (e.g. training state does not fit)
        return SearchPoint(alloc, 0.0, str(e).splitlines()[0])
    return SearchPoint(alloc, sum(r.throughput for r in runs.values()) / len(runs), runs=runs)
