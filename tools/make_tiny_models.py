"""Rebuild the embedded default (tiny arithmetic policy, GenRM, tokenizer) and compare it with
the shipped one in `pivot/tiny/weights/`.

    python tools/make_tiny_models.py [--out .cache/tiny-build] [--seed 0] [--install]

The build runs torch on one thread (two threads on a core another process uses spin and ran
10x slower) and is deterministic for a seed on one CPU and torch build; it prints the held-out
figures, the wall time and whether every file is identical to the shipped one. `--install`
replaces the shipped files with the build (commit them with the manifest).
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pivot.tiny.build import build_tiny_models  # noqa: E402
from pivot.tiny.recipe import TinyRecipe  # noqa: E402
from pivot.tiny.shipped import WEIGHTS, mismatches, read_manifest  # noqa: E402

SMOKE = dict(
    train_problems=64,
    policy_steps=2,
    policy_warmup=1,
    genrm_seed_steps=2,
    genrm_base_steps=2,
    genrm_steps=2,
    batch_size=4,
    eval_problems=4,
    genrm_own_samples=8,
)


def compare(out: Path, manifest: dict) -> str:
    try:
        shipped = read_manifest(WEIGHTS)
    except FileNotFoundError:
        return "nothing is shipped yet to compare with"
    if shipped["recipe"] != manifest["recipe"] or shipped["seed"] != manifest["seed"]:
        return "the shipped files were made by another recipe or seed: not comparable"
    bad = mismatches(out, shipped)
    if not bad:
        return "identical to the shipped files, byte for byte"
    env = shipped["built_with"]
    return (
        f"differs from the shipped files in {len(bad)} of {len(shipped['files'])} ({', '.join(bad[:4])}): "
        f"expected on another CPU or torch build (the shipped ones: torch {env['torch']}, {env['threads']} thread, "
        f"{env['machine']}), where float rounding differs and training amplifies it"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--out", type=Path, default=ROOT / ".cache" / "tiny-build", help="build folder (replaced)"
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the data, initialisation and sampling"
    )
    parser.add_argument(
        "--install", action="store_true", help="replace pivot/tiny/weights/ with the build"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help=f"a few steps of every stage on little data (does the build run; its models are not the shipped ones): {SMOKE}",  # noqa: E501 (one table row, easier read whole)
    )
    args = parser.parse_args()
    if args.smoke and args.install:
        parser.error("--smoke builds models that must not replace the shipped ones; drop --install")
    shutil.rmtree(args.out, ignore_errors=True)
    start = time.perf_counter()
    recipe = dataclasses.replace(TinyRecipe(), **SMOKE) if args.smoke else TinyRecipe()
    manifest = build_tiny_models(
        args.out, args.seed, recipe, log=lambda m: print(f"  {m}", flush=True)
    )
    m = manifest["metrics"]
    print(
        f"built in {time.perf_counter() - start:.0f} s into {args.out} (torch {manifest['built_with']['torch']}, "
        f"{manifest['built_with']['threads']} thread)"
    )
    print(
        f"policy accuracy on held-out problems: greedy {m['policy_greedy_accuracy']:.1%}, "
        f"sampled (T=1) {m['policy_sampled_accuracy']:.1%}; by digit count: "
        + ", ".join(f"{d}d {a:.0%}" for d, a in m["policy_greedy_by_digits"].items())
    )
    print(
        f"GenRM verdict agreement with correctness: {m['genrm_agreement']:.1%} (balanced held-out set), "
        f"{m['genrm_agreement_on_policy_samples']:.1%} on the policy's own samples"
    )
    print(compare(args.out, manifest))
    if args.install:
        shutil.rmtree(WEIGHTS, ignore_errors=True)
        shutil.copytree(args.out, WEIGHTS)
        print(f"installed into {WEIGHTS}: commit it with its manifest")


if __name__ == "__main__":
    main()
