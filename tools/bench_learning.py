"""Learning curves per deployment mode (the paper's Figure 15): does shifting change what is learned?

    python tools/bench_learning.py [--steps N] [--seeds 0,1] [--out runs/learning] [extra pivot flags...]

Runs the main job (torchrun, 4 CPU ranks, the embedded tiny models unless flags say otherwise)
once per mode with the same seed and data, and the reference mode (pivot) once more per extra
seed. Plots batch reward, the accuracy of every rollout (before dynamic sampling drops uniform
groups) and greedy held-out accuracy against the step for every mode in one PNG,
and prints: held-out accuracy before and after per mode, and each mode's distance to the
reference's curve against the run-to-run spread of the reference across seeds, measured in the
same invocation. A mode agrees when its distance is within that spread.

Distance between two curves: mean over steps of |a - b| after a centred moving average (window
`--smooth`) of the accuracy of every rollout (the batch reward is not compared: dynamic sampling
trains mixed groups only, which holds it near the middle whatever the policy does), and the
mean |a - b| of the held-out gain (accuracy minus the run's own first evaluation: another seed
draws another held-out set, whose level differs) over the evaluations. A run learned when its
last evaluation beats its first by at least `--min-gain` (10 points) and by more than four
paired standard errors (`pivot.rl.evaluation.paired_gain`: the same prompts, compared one by
one). Steps and held-out size are the preset's unless given.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))
from torchrun_job import torchrun_main

from pivot.rl.evaluation import LEARNED_SE, learned
from pivot.runtime.records.metrics import read_rows

MODES = ("pivot", "colocated", "disaggregated", "rr_colocated")
REFERENCE = "pivot"


def run(
    mode: str, seed: int, steps: int | None, out: Path, extra: list[str], reuse: bool
) -> dict[str, list]:
    run_dir = out / f"{mode}-seed{seed}"
    if reuse and (run_dir / "eval.jsonl").is_file():
        print(f"  {mode:14s} seed {seed}: reusing {run_dir}", flush=True)
        return curve(run_dir, mode, seed, float("nan"))
    # a run again replaces the tool's own earlier one (the job refuses a --log.dir holding
    # checkpoints unless it resumes them)
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = torchrun_main(
        4,
        "--cluster.mode",
        mode,
        "--seed",
        str(seed),
        *(["--train.steps", str(steps)] if steps else []),
        "--log.dir",
        str(run_dir),
        "--log.no-progress",
        "--log.no-tensorboard",
        "--checkpoint.every",
        "0",
        *extra,
    )
    t0 = time.monotonic()
    proc = subprocess.run(
        cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    if proc.returncode != 0:
        raise SystemExit(
            f"{mode} seed {seed} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        )
    return curve(run_dir, mode, seed, time.monotonic() - t0)


def curve(run_dir: Path, mode: str, seed: int, seconds: float) -> dict[str, list]:
    metrics = read_rows(run_dir / "metrics.jsonl")
    evals = read_rows(run_dir / "eval.jsonl")
    k = max(1, min(10, len(metrics) // 4))
    reward = [r["reward/mean"] for r in metrics]
    # dynamic sampling trains mixed groups only, which holds the batch's accuracy near the middle:
    # the accuracy of every rollout, dropped groups included, is what climbs
    sampled = [r.get("rollout/accuracy_sampled", float("nan")) for r in metrics]
    print(
        f"  {mode:14s} seed {seed}: {seconds:5.0f} s, held-out "
        f"{evals[0]['accuracy']:.3f} -> {evals[-1]['accuracy']:.3f}, batch reward "
        f"{sum(reward[:k]) / k:.3f} -> {sum(reward[-k:]) / k:.3f}, sampled accuracy "
        f"{sum(sampled[:k]) / k:.3f} -> {sum(sampled[-k:]) / k:.3f} (first and last {k} steps)",
        flush=True,
    )
    return {
        "step": [r["step"] for r in metrics],
        "reward": reward,
        "sampled": sampled,
        "eval_step": [r["step"] for r in evals],
        "eval": [r["accuracy"] for r in evals],
        "eval_scores": [evals[0]["scores"], evals[-1]["scores"]],
    }


def smooth(values: list[float], window: int) -> list[float]:
    half = window // 2
    return [
        sum(values[max(0, i - half) : i + half + 1]) / len(values[max(0, i - half) : i + half + 1])
        for i in range(len(values))
    ]


def distance(a: list[float], b: list[float]) -> float:
    n = min(len(a), len(b))
    return sum(abs(x - y) for x, y in zip(a[:n], b[:n])) / max(n, 1)


def gains(curve: dict[str, list]) -> list[float]:
    return [a - curve["eval"][0] for a in curve["eval"]]


def plot(curves: dict[str, dict[str, list]], window: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_r, ax_s, ax_e) = plt.subplots(1, 3, figsize=(16, 4))
    for name, c in curves.items():
        style = "--" if "seed" in name and not name.endswith("seed0") else "-"
        ax_r.plot(c["step"], smooth(c["reward"], window), style, label=name)
        ax_s.plot(c["step"], smooth(c["sampled"], window), style, label=name)
        ax_e.plot(c["eval_step"], c["eval"], style, marker="o", label=name)
    ax_r.set(
        xlabel="step",
        ylabel=f"batch reward (moving average, {window} steps)",
        title="reward of the trained groups",
    )
    ax_s.set(
        xlabel="step",
        ylabel=f"accuracy (moving average, {window} steps)",
        title="every rollout, before dynamic sampling",
    )
    ax_e.set(
        xlabel="step", ylabel="greedy held-out accuracy", title="held-out accuracy (verifiable)"
    )
    for ax in (ax_r, ax_s, ax_e):
        ax.grid(alpha=0.3)
    ax_e.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--steps", type=int, default=0, help="RL steps per run (0: the preset's)")
    ap.add_argument(
        "--min-gain",
        type=float,
        default=0.10,
        help="held-out gain a run must reach to count as learned",
    )
    ap.add_argument(
        "--seeds",
        default="0,1",
        help="the first seeds every mode; the others the reference mode only",
    )
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument(
        "--smooth",
        type=int,
        default=9,
        help="moving-average window of the curves compared, in steps",
    )
    ap.add_argument("--out", default=str(ROOT / "runs" / "learning"))
    ap.add_argument(
        "--reuse",
        action="store_true",
        help="read runs already in --out instead of running them again",
    )
    args, extra = ap.parse_known_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    modes = args.modes.split(",")
    out = Path(args.out)
    steps = args.steps or "the preset's"
    print(
        f"learning curves: {steps} steps per run, modes {modes}, seeds {seeds} ({REFERENCE} only beyond the first)"
    )
    curves: dict[str, dict[str, list]] = {}
    for mode in modes:
        for seed in seeds if mode == REFERENCE else seeds[:1]:
            curves[f"{mode}-seed{seed}"] = run(mode, seed, args.steps, out, extra, args.reuse)
    png = out / "learning_curves.png"
    plot(curves, args.smooth, png)
    (out / "curves.json").write_text(json.dumps(curves))

    ref = curves[f"{REFERENCE}-seed{seeds[0]}"]
    ref_r = smooth(ref["sampled"], args.smooth)
    spread = {"sampled": 0.0, "eval": 0.0}
    for seed in seeds[1:]:
        other = curves[f"{REFERENCE}-seed{seed}"]
        spread["sampled"] = max(
            spread["sampled"], distance(ref_r, smooth(other["sampled"], args.smooth))
        )
        spread["eval"] = max(spread["eval"], distance(gains(ref), gains(other)))
    print(
        f"\nheld-out accuracy (greedy, {len(ref['eval'])} evaluations) and distance to {REFERENCE} seed {seeds[0]}; "
        f"reference spread across seeds: sampled accuracy {spread['sampled']:.3f}, held-out {spread['eval']:.3f}"
    )
    print(
        f"{'run':22s} {'before':>7s} {'after':>7s} {'gain':>7s} {'se':>6s} {'d(sampled)':>10s} "
        f"{'/spread':>8s} {'d(held-out)':>12s} {'/spread':>8s}  verdict"
    )
    ok = True
    for name, c in curves.items():
        d_r = distance(ref_r, smooth(c["sampled"], args.smooth))
        d_e = distance(gains(ref), gains(c))
        ratio_r = d_r / spread["sampled"] if spread["sampled"] else float("nan")
        ratio_e = d_e / spread["eval"] if spread["eval"] else float("nan")
        # one seed measures no spread: the modes are then judged on their own gain only
        if name.startswith(REFERENCE) or len(seeds) == 1:
            agree = True
            verdict = "reference" if name.startswith(REFERENCE) else "not compared (one seed)"
        else:
            agree = ratio_r <= 1.0 and ratio_e <= 1.0
            verdict = "agrees" if agree else "DIFFERS"
        gain, se, up = learned(*c["eval_scores"], min_gain=args.min_gain)
        ok = ok and agree and up
        verdict += "" if up else f", gain below {args.min_gain:.2f} or {LEARNED_SE:g} se"
        print(
            f"{name:22s} {c['eval'][0]:7.3f} {c['eval'][-1]:7.3f} {gain:+7.3f} {se:6.3f} "
            f"{d_r:10.3f} {ratio_r:7.2f}x {d_e:12.3f} {ratio_e:7.2f}x  {verdict}"
        )
    print(
        f"\nfigure: {png}\n{'PASS' if ok else 'MISS'}: every mode "
        + ("within the reference's seed spread, and " if len(seeds) > 1 else "")
        + f"up at least {args.min_gain:.2f} and more than {LEARNED_SE:g} se on held-out problems"
    )


if __name__ == "__main__":
    main()
