"""Render a run's timeline.jsonl as a PNG in the style of the paper's Figure 10:
throughput per role on top, devices per role (stacked) below, shift events as markers.

    python tools/plot_timeline.py runs/latest/timeline.jsonl [-o runs/latest/timeline.png]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import matplotlib  # noqa: E402

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from pivot.runtime.records.metrics import read_jsonl  # noqa: E402

ROLES = ("rollout", "reward", "train")
COLORS = {"rollout": "#4C72B0", "reward": "#DD8452", "train": "#55A868", "overall": "#333333"}


def plot(rows: list[dict], out: Path, title: str = "") -> Path:
    samples = [r for r in rows if r.get("kind") == "sample"]
    shifts = [r for r in rows if r.get("kind") == "shift" and r.get("event") == "plan"]
    if not samples:
        raise SystemExit("timeline has no samples")
    t = [r["time"] for r in samples]
    fig, (ax_tp, ax_dev) = plt.subplots(
        2, 1, figsize=(10, 5.5), sharex=True, gridspec_kw={"height_ratios": [3, 2]}
    )
    for role in ("rollout", "reward"):
        ax_tp.plot(
            t,
            [r["throughput"].get(role, 0.0) for r in samples],
            label=role,
            color=COLORS[role],
            lw=1.2,
        )
    ax_tp.set_ylabel("tokens/s")
    ax_tp.set_title(title or "throughput and devices per role")
    stacks = [[r["devices"].get(role, 0) for r in samples] for role in ROLES]
    ax_dev.stackplot(
        t,
        *stacks,
        labels=["RO", "RM", "TR"],
        colors=[COLORS[r] for r in ROLES],
        step="post",
        alpha=0.85,
    )
    ax_dev.set_ylabel("devices")
    ax_dev.set_xlabel("time (s)")
    ax_dev.legend(loc="upper right", fontsize=8, ncol=3)
    for s in shifts:
        for ax in (ax_tp, ax_dev):
            ax.axvline(s["time"], color="k", lw=0.5, ls=":", alpha=0.6)
    # recoveries (docs/reliability.md): a red x where an engine failed, a green + where its
    # replica served again, a purple v where a training step split to fit device memory, a
    # black line where a replica stayed down; a blue diamond where the training slot was
    # re-sized by measurement (pivot/runtime/control/sizing.py)
    marks = {
        "engine_failed": ("x", "#C44E52"),
        "engine_rebuilt": ("+", "#2CA02C"),
        "train_split": ("v", "#8172B3"),
        "train_resized": ("D", "#4C72B0"),
    }
    top = max((max(r["throughput"].values(), default=0.0) for r in samples), default=0.0)
    for event, (marker, color) in marks.items():
        at = [r for r in rows if r.get("kind") == "shift" and r.get("event") == event]
        if at:
            ax_tp.scatter(
                [r["time"] for r in at],
                [top * 1.02] * len(at),
                marker=marker,
                color=color,
                s=40,
                zorder=3,
                label=event.replace("_", " "),
            )
    for r in rows:
        if r.get("kind") == "shift" and r.get("event") == "replica_retired":
            ax_tp.axvline(r["time"], color="k", lw=1.0, alpha=0.8)
    ax_tp.legend(loc="upper right", fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("timeline", type=Path)
    ap.add_argument("-o", "--out", type=Path, default=None)
    ap.add_argument("--title", default="")
    args = ap.parse_args()
    out = args.out or args.timeline.with_suffix(".png")
    print(plot(read_jsonl(args.timeline), out, args.title))


if __name__ == "__main__":
    main()
