"""Render a simulated run as a Figure 10 style timeline: rollout, reward and overall throughput
(Equation 1) over time, the devices of each role below, training intervals shaded, shifts marked."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pivot.sim.result import SimResult

if TYPE_CHECKING:  # matplotlib is imported only when a timeline is drawn
    from matplotlib.axes import Axes


def render_timeline(runs: dict[str, SimResult], path: str | Path) -> Path:
    """One column per run (e.g. {"Disaggregated": r1, "PivotRL": r2}); returns the PNG path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, len(runs), figsize=(6 * len(runs), 9), sharex="col", squeeze=False)
    for col, (title, res) in enumerate(runs.items()):
        ts = [p.t for p in res.timeline]
        series = (
            ("Rollout", [p.rollout_tps for p in res.timeline]),
            ("Reward", [p.reward_tps for p in res.timeline]),
            ("Overall", [p.overall_tps for p in res.timeline]),
        )
        for row, (name, ys) in enumerate(series):
            ax = axes[row][col]
            ax.plot(ts, ys, lw=0.8)
            ax.set_ylabel(f"{name} tok/s")
            _shade_training(ax, res)
        ax = axes[3][col]
        roles = ("rollout", "reward", "train")
        ax.stackplot(
            ts, *[[p.devices[r] for p in res.timeline] for r in roles], labels=roles, step="post"
        )
        for s in res.shifts:
            if s.up:
                ax.axvline(s.t_end, color="k", lw=0.3, alpha=0.4)
        ax.set_ylabel("devices")
        ax.set_xlabel("time (s)")
        ax.legend(loc="upper right", fontsize=7)
        axes[0][col].set_title(f"{title}: {res.throughput:,.0f} tok/s, {res.sim_time_s:,.0f} s")
    fig.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def _shade_training(ax: Axes, res: SimResult) -> None:
    start = None
    for p in res.timeline:
        if p.training and start is None:
            start = p.t
        elif not p.training and start is not None:
            ax.axvspan(start, p.t, color="pink", alpha=0.4, lw=0)
            start = None
    if start is not None:
        ax.axvspan(start, res.timeline[-1].t, color="pink", alpha=0.4, lw=0)
