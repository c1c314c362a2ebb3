"""Emulated accelerators (`--cluster.device emulated`): CPU ranks that run the real runtime and
the real tiny models but take the device time of the paper-scale models of `--emulate.preset`
on `--emulate.hardware`, from the simulator's cost model, scaled by `--emulate.time-scale`.

    install(cfg, spec, inference, trainer)     wrap a rank's roles (engine/train steps, shifts)
    controller_parts(cfg, spec)                 rank 0: response lengths and per-role profiles
    write_tally / tally_lines                   each rank's device time, for the run summary
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from pivot.config import PivotConfig
from pivot.dist import ClusterSpec
from pivot.emulate.clock import EmulatedClock, WorkTally
from pivot.emulate.costs import EmulatedCosts, paper_config, runtime_config
from pivot.emulate.flow import EmulatedLengths, PromptShape, emulated_workload
from pivot.emulate.roles import EmulatedInference, EmulatedTrainer
from pivot.model import TextTokenizer
from pivot.sched.throughput import ThroughputModel
from pivot.sim.workload import Workload

__all__ = [
    "EmulatedClock",
    "EmulatedCosts",
    "EmulatedLengths",
    "PromptShape",
    "controller_parts",
    "emulated_workload",
    "install",
    "paper_config",
    "read_tallies",
    "runtime_config",
    "tally_lines",
    "write_tally",
]


def install(
    cfg: PivotConfig, spec: ClusterSpec, inference: dict[str, Any], trainer: Any
) -> tuple[dict[str, Any], Any, EmulatedClock]:
    costs = EmulatedCosts(cfg, spec.world_size, spec.local_world_size)
    clock = EmulatedClock(cfg.emulate.time_scale)
    return (
        {role: EmulatedInference(r, costs, clock) for role, r in inference.items()},
        EmulatedTrainer(trainer, costs, clock),
        clock,
    )


def controller_parts(
    cfg: PivotConfig, spec: ClusterSpec, policy_tok: TextTokenizer
) -> tuple[EmulatedLengths, dict[str, ThroughputModel]]:
    """The flow's drawn lengths (the simulator's workload) and each inference role's throughput
    model in the runtime's units."""
    costs = EmulatedCosts(cfg, spec.world_size, spec.local_world_size)
    workload = Workload(prompts_per_step=cfg.train.batch_prompts, group_size=cfg.train.group_size)
    lengths = EmulatedLengths(
        policy_tok,
        workload=workload,
        length_scale=cfg.emulate.length_scale,
        devices=spec.world_size,
        seed=cfg.seed,
    )
    return lengths, {role: costs.runtime_profile(role) for role in ("rollout", "reward")}


def write_tally(run_dir: str, rank: int, clock: EmulatedClock) -> None:
    folder = Path(run_dir) / "emulated"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"rank_{rank}.json").write_text(
        json.dumps({k: asdict(t) for k, t in clock.tally.items()})
    )


def read_tallies(run_dir: str | Path) -> dict[str, WorkTally]:
    """Every rank's tallies summed per kind of work."""
    out: dict[str, WorkTally] = {}
    for file in sorted((Path(run_dir) / "emulated").glob("rank_*.json")):
        for kind, t in json.loads(file.read_text()).items():
            acc = out.setdefault(kind, WorkTally())
            for name, value in t.items():
                setattr(acc, name, getattr(acc, name) + value)
    return out


def tally_lines(run_dir: str | Path) -> list[str]:
    """The summary's account of emulated device time: how much of each kind of work's wall
    window the real tiny model spent computing, and how far compute overran the deadlines."""
    tallies = read_tallies(run_dir)
    if not tallies:
        return []
    parts = []
    for kind, t in sorted(tallies.items()):
        window = t.compute_s + t.waited_s
        parts.append(
            f"{kind} {t.count} x, compute {t.compute_s / max(window, 1e-9):.0%} of the window"
            + (f", overran {t.overrun_s:.2f} s" if t.overrun_s > 0.005 else "")
        )
    return [
        "  emulated device time (tiny-model compute / emulated wall window): " + "; ".join(parts)
    ]
