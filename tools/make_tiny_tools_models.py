"""Rebuild the tiny tools models (`--preset tiny-tools`: the tiny policy and GenRM warmed up on
the calculator task, pivot/tiny/tools_build.py) and compare them with the shipped ones in
`pivot/tiny/weights_tools/`.

    python tools/make_tiny_tools_models.py [--out .cache/tiny-tools-build] [--seed 0] [--install]

One torch thread, seeded: deterministic on one CPU and torch build (about 4 minutes here). It
prints the held-out figures and whether every file is identical to the shipped one;
`--install` replaces the shipped files with the build (commit them with the manifest).
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pivot.tiny.shipped import mismatches, read_manifest  # noqa: E402
from pivot.tiny.tools_build import TOOLS_WEIGHTS, ToolsRecipe, build_tools_policy  # noqa: E402

SMOKE = dict(problems=48, steps=2, warmup=1, genrm_steps=2, batch_size=4, eval_problems=4)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", type=Path, default=ROOT / ".cache" / "tiny-tools-build")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--install", action="store_true", help="replace pivot/tiny/weights_tools/ with the build"
    )
    parser.add_argument(
        "--smoke", action="store_true", help=f"a few steps on little data (not shippable): {SMOKE}"
    )
    args = parser.parse_args()
    if args.smoke and args.install:
        parser.error("--smoke builds models that must not replace the shipped ones; drop --install")
    shutil.rmtree(args.out, ignore_errors=True)
    recipe = dataclasses.replace(ToolsRecipe(), **SMOKE) if args.smoke else ToolsRecipe()
    manifest = build_tools_policy(args.out, args.seed, recipe, log=lambda m: print(f"  {m}"))
    m = manifest["metrics"]
    print(f"built in {m['build_seconds']:.0f} s into {args.out}")
    print(
        f"policy, held-out: greedy {m['greedy_accuracy']:.1%} right, calling the tool on "
        f"{m['greedy_tool_calls']:.1%}; sampled {m['sampled_accuracy']:.1%} right, calling on "
        f"{m['sampled_tool_calls']:.1%} ({m['sampled_accuracy_when_called']:.1%} right when it calls)"
    )
    print(
        f"GenRM agreement with correctness: transcripts {m['genrm_agreement_transcripts']:.1%}, "
        f"column work {m['genrm_agreement_columns']:.1%}, the policy's own samples "
        f"{m['genrm_agreement_policy_samples']:.1%}"
    )
    shipped = read_manifest(TOOLS_WEIGHTS)
    if shipped["recipe"] != manifest["recipe"] or shipped["seed"] != manifest["seed"]:
        print("the shipped files were made by another recipe or seed: not comparable")
    else:
        bad = mismatches(args.out, shipped)
        print(
            f"differs from the shipped files in {bad}" if bad else "identical to the shipped files"
        )
    if args.install:
        shutil.rmtree(TOOLS_WEIGHTS, ignore_errors=True)
        shutil.copytree(args.out, TOOLS_WEIGHTS)
        print(f"installed into {TOOLS_WEIGHTS}: commit it with its manifest")


if __name__ == "__main__":
    main()
