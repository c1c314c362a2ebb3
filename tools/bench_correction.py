"""Does correcting the rollout/trainer mismatch change what is learned? Learning curves with the
rollout correction off and on (pivot/rl/mismatch.py), several seeds each, in one invocation.

    python tools/bench_correction.py [--seeds 0,1,2] [--steps N] [--out runs/correction] [extra pivot flags...]

Runs the main job (torchrun, 4 CPU ranks, the tiny task in bfloat16 unless flags say otherwise:
bf16 is what users run and where the engine and trainer round apart) once per variant and seed:
`off` (the reference), `token-TIS` (--train.rollout-is token, veRL's `decoupled_token_is`) and
`seq-MIS` (--train.rollout-rs sequence). Prints per variant the held-out gain (mean over seeds,
and its spread), the mismatch it saw (current-version tokens: the engine's numerics; older ones:
staleness too) and the share of tokens its correction truncated or rejected, each variant's
gain as a ratio to `off`'s measured in the same invocation, and draws the curves in one PNG.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from pivot.rl.evaluation import learned
from pivot.runtime.records.metrics import read_rows
from tools.bench_learning import plot, run

VARIANTS = {
    "off": [],
    "token-TIS": ["--train.rollout-is", "token"],
    "seq-MIS": ["--train.rollout-rs", "sequence"],
}
REFERENCE = "off"
FIGURES = (
    "mismatch_current/abs_mean",
    "mismatch_stale/abs_mean",
    "mismatch_stale/k3",
    "rollout_is/truncated_share",
    "rollout_rs/rejected_share",
)


def mean_figures(run_dir: Path) -> dict[str, float]:
    """Each mismatch figure's mean over the run's steps (current-version figures over the steps
    that had such tokens)."""
    rows = read_rows(run_dir / "metrics.jsonl")
    out = {}
    for name in FIGURES:
        key = f"train/{name}"
        values = [
            r[key]
            for r in rows
            if key in r
            and (not name.startswith("mismatch_current") or r["train/mismatch_current/token_share"])
        ]
        out[name] = statistics.fmean(values) if values else float("nan")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--steps", type=int, default=0, help="RL steps per run (0: the preset's)")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--dtype", default="bfloat16", help="--model.dtype of every run")
    ap.add_argument("--smooth", type=int, default=9, help="moving-average window of the curves")
    ap.add_argument("--out", default=str(ROOT / "runs" / "correction"))
    ap.add_argument("--reuse", action="store_true", help="read runs already in --out")
    args, extra = ap.parse_known_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    variants = args.variants.split(",")
    out = Path(args.out)
    print(f"rollout correction: variants {variants}, seeds {seeds}, dtype {args.dtype}")
    curves, gains, figures = {}, {}, {}
    for variant in variants:
        flags = ["--model.dtype", args.dtype, *VARIANTS[variant], *extra]
        for seed in seeds:
            c = run("pivot", seed, args.steps, out / variant, flags, args.reuse)
            curves[f"{variant}-seed{seed}"] = c
            gains.setdefault(variant, []).append(learned(*c["eval_scores"])[0])
            figures[f"{variant}-seed{seed}"] = mean_figures(out / variant / f"pivot-seed{seed}")
    png = out / "correction_curves.png"
    plot(curves, args.smooth, png)
    (out / "curves.json").write_text(json.dumps({"curves": curves, "figures": figures}))

    ref = statistics.fmean(gains[REFERENCE]) if REFERENCE in gains else float("nan")
    ref = ref if ref else float("nan")  # a run too short to learn gives no ratio
    print(
        f"\n{'variant':10s} {'held-out gain (mean)':>20s} {'min..max':>14s} {'/ off':>7s}  "
        + "  ".join(f"{f:>26s}" for f in FIGURES)
    )
    for variant in variants:
        g = gains[variant]
        mean = statistics.fmean(g)
        figs = [statistics.fmean(figures[f"{variant}-seed{s}"][f] for s in seeds) for f in FIGURES]
        print(
            f"{variant:10s} {mean:+20.3f} {min(g):+6.3f}..{max(g):+6.3f} {mean / ref:7.2f}  "
            + "  ".join(f"{x:26.5f}" for x in figs)
        )
    print(f"\nfigure: {png}")


if __name__ == "__main__":
    main()
