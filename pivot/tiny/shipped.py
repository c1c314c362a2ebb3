"""The embedded default as shipped: the tiny policy, GenRM and tokenizer in `pivot/tiny/weights/`.

They are committed (a few MB of safetensors) rather than built on first use: a build depends
on the CPU and its thread count (another machine gave other weights and other figures), takes
minutes, and made a first run's ranks wait on rank 0. `manifest.json` beside them records the
recipe, the build's torch version and thread count, the held-out figures the build measured,
and a SHA-256 per file; `ensure_tiny_models` checks them so a damaged checkout fails in one
line instead of training a corrupted model. `tools/make_tiny_models.py` rebuilds them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

WEIGHTS = Path(__file__).resolve().parent / "weights"
MANIFEST = "manifest.json"


@dataclasses.dataclass(frozen=True)
class TinyModels:
    root: Path
    policy: Path
    genrm: Path
    tokenizer: Path
    policy_greedy_accuracy: float
    policy_sampled_accuracy: float
    genrm_agreement: float  # balanced: one correct and one wrong candidate per held-out problem
    genrm_agreement_on_policy_samples: float
    policy_greedy_by_digits: dict[str, float]  # held-out accuracy per column count
    build_seconds: float


def folder_checksums(root: Path) -> dict[str, str]:
    """SHA-256 of every file under `root` but the manifest, by path relative to it."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name != MANIFEST
    }


def read_manifest(root: Path = WEIGHTS) -> dict[str, Any]:
    path = root / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(
            f"the embedded tiny models are missing: no {path} (restore pivot/tiny/weights/ from git, "
            "or rebuild with: python tools/make_tiny_models.py --install)"
        )
    return json.loads(path.read_text())


def mismatches(root: Path, manifest: dict[str, Any]) -> list[str]:
    """Files whose checksum differs from the manifest's, or that one of the two lacks."""
    have, want = folder_checksums(root), manifest["files"]
    return sorted(name for name in have.keys() | want.keys() if have.get(name) != want.get(name))


def ensure_tiny_models(root: Path = WEIGHTS) -> TinyModels:
    """The shipped tiny policy + GenRM, after checking every file against the manifest."""
    manifest = read_manifest(root)
    bad = mismatches(root, manifest)
    if bad:
        raise ValueError(
            f"the embedded tiny models in {root} differ from their manifest ({', '.join(bad[:3])}"
            f"{' ...' if len(bad) > 3 else ''}): restore them with `git checkout -- {root}`"
        )
    return TinyModels(
        root=root,
        policy=root / "policy",
        genrm=root / "genrm",
        tokenizer=root / "tokenizer.json",
        **manifest["metrics"],
    )
