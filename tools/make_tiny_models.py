"""Build (or reuse) the embedded default: the tiny arithmetic policy and GenRM.

    python tools/make_tiny_models.py [--seed 0] [--out .cache/tiny] [--force]

Prints where the models are, the held-out accuracies and the wall time.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pivot.tiny.models import DEFAULT_CACHE, TinyRecipe, cache_root, ensure_tiny_models  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0, help="seed of the data, initialisation and sampling")
    parser.add_argument("--out", type=Path, default=DEFAULT_CACHE, help="cache folder (one sub-folder per recipe+seed)")
    parser.add_argument("--force", action="store_true", help="rebuild even when a complete build is cached")
    args = parser.parse_args()
    start = time.perf_counter()
    if args.force:  # remove only this seed's finished build
        shutil.rmtree(cache_root(args.out, args.seed, TinyRecipe()), ignore_errors=True)
    models = ensure_tiny_models(args.out, args.seed, log=lambda m: print(f"  {m}", flush=True))
    wall = time.perf_counter() - start
    print(f"policy:    {models.policy}")
    print(f"genrm:     {models.genrm}")
    print(f"tokenizer: {models.tokenizer}")
    print(
        f"policy accuracy on held-out problems: greedy {models.policy_greedy_accuracy:.1%}, "
        f"sampled (T=1) {models.policy_sampled_accuracy:.1%}"
    )
    by_digits = ", ".join(f"{d}d {a:.0%}" for d, a in models.policy_greedy_by_digits.items())
    print(f"policy greedy accuracy by digit count: {by_digits}")
    print(
        f"GenRM verdict agreement with correctness: {models.genrm_agreement:.1%} (balanced held-out set), "
        f"{models.genrm_agreement_on_policy_samples:.1%} on the policy's own samples"
    )
    print(f"build time {models.build_seconds:.0f}s (when built now), wall time {wall:.1f}s")


if __name__ == "__main__":
    main()
