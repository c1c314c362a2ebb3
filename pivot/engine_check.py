"""What each role's engine needs, checked at start-up before any process group exists: e.g.
`--rollout.engine.backend vllm` (or reward's) needs vLLM 0.32.0 importable, and vLLM's CPU
build serves only head sizes its CPU attention has kernels for
(`pivot.engine.backends.install`). One line per problem, naming what to install or change;
nothing falls back to another engine silently. Reads package metadata and config.json only (no
torch, no vLLM import: every rank runs this)."""

from __future__ import annotations

from pathlib import Path

from pivot.config import PivotConfig
from pivot.engine.backends.install import install_problems
from pivot.tiny.shipped import WEIGHTS


def engine_problems(cfg: PivotConfig) -> list[str]:
    """One line per role whose engine cannot start here (empty: all can)."""
    out: list[str] = []
    roles = (
        ("rollout", cfg.rollout.engine.backend, cfg.model.policy or WEIGHTS / "policy"),
        ("reward", cfg.reward.engine.backend, cfg.model.genrm or WEIGHTS / "genrm"),
    )
    for role, backend, folder in roles:
        flag = f"--{role}.engine.backend {backend}"
        out += install_problems(backend, flag, Path(folder), cfg.cluster.device)
    return out
