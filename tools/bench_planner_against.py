"""tools/bench_planner.py --against REV: pivot/ as of another git revision imported into this
process beside ours, and the table of ours / REV once both versions have planned."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def load_version(rev: str, tmp: str) -> SimpleNamespace:
    """pivot/ as of git revision `rev`, imported into this process beside ours: `git archive`
    into `tmp`, its modules imported under their own names, then ours put back in
    sys.modules (neither version imports pivot lazily on the planner's path, so each keeps
    calling its own code)."""
    tree = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "pivot"], capture_output=True, check=False
    )
    if tree.returncode != 0:
        raise SystemExit(f"--against {rev}: git archive failed: {tree.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", tmp], input=tree.stdout, check=True)
    ours: dict[str, ModuleType] = {
        k: m for k, m in sys.modules.items() if k == "pivot" or k.startswith("pivot.")
    }
    for k in ours:
        del sys.modules[k]
    sys.path.insert(0, tmp)
    try:
        cfg, plan, sched = (
            importlib.import_module(f"pivot.{m}") for m in ("config", "plan", "sched")
        )
        return SimpleNamespace(
            PlannerConfig=cfg.PlannerConfig,
            PivotPlanner=plan.PivotPlanner,
            ClusterSnapshot=plan.ClusterSnapshot,
            Replica=sched.Replica,
            SeqState=sched.SeqState,
            ThroughputModel=sched.ThroughputModel,
        )
    finally:
        sys.path.remove(tmp)
        for k in [k for k in sys.modules if k == "pivot" or k.startswith("pivot.")]:
            del sys.modules[k]
        sys.modules.update(ours)


def print_against(
    rev: str, args: argparse.Namespace, ours: list[dict[str, Any]], theirs: list[dict[str, Any]]
) -> None:
    print(
        f"\nours / {rev}: both versions in this process, their rounds alternating (least of {args.repeats}; plan, "
        f"step 4, down, up: process CPU of plan() and of the scheduler's shifts; < 1 is faster)"
    )
    print(f"{'devs':>5} | {'plan cpu':>8} {'sim cpu':>8} {'down':>6} {'up':>6} | {'same plan':>9}")
    for r, t in zip(ours, theirs):

        def ratio(k: str) -> str:
            return f"{r[k] / t[k]:.2f}" if t[k] > 0 else "-"  # noqa: B023 (called in this iteration)

        same = "yes" if r["plan"] == t["plan"] and r["benefits"] == t["benefits"] else "NO"
        print(
            f"{r['n']:>5} | {ratio('cpu_s'):>8} {ratio('sim_cpu_s'):>8} {ratio('down_s'):>6} {ratio('up_s'):>6} | {same:>9}"  # noqa: E501 (one table row, easier read whole)
        )
        if same == "NO":
            raise SystemExit(f"{r['n']} devices: the plan differs from {rev}'s")
