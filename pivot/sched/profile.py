"""Per-role throughput profiles: the fitted A, B, C, D of one model served by one replica shape.

A profile is a JSON file holding `A`, `B`, `C`, `D` (seconds per decode step, see
`pivot.sched.throughput`), `prefill_s_per_token` where the profiler timed prefill and, for the
reader's information, how it was measured (`model`,
`role`, `hardware`, `tp`, `dtype`, `attention`, fit quality and the raw samples).
`tools/profile_engine.py` writes it with `write_profile`; the runtime reads it with
`read_profile`: one format, one reader.

Which profile a role plans with (`resolve_profile`), first match wins:
1. `--rollout.throughput-profile PATH` / `--reward.throughput-profile PATH`;
2. the profile cached for this replica shape: `<cache>/throughput/<key>.json`, the key naming
   the model folder (its config.json), the hardware, TP size, dtype and attention kernel
   (`tools/profile_engine.py --model PATH` writes there by default);
3. the embedded tiny models: `configs/throughput_tiny_cpu_<role>.json`, fitted on this repo's
   CPU engine;
4. otherwise the tiny file of the role as well, flagged `fallback` (the caller warns: the
   planner's T_i and benefit are then only relative).
Pure Python: no torch import (the planner and simulator use it at cluster scale).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pivot.sched.throughput import ThroughputModel

ROOT = Path(__file__).resolve().parents[2]
TINY_PROFILE = {
    role: ROOT / "configs" / f"throughput_tiny_cpu_{role}.json" for role in ("rollout", "reward")
}
"""The fitted profile of each embedded tiny model on CPU (policy serves rollout, GenRM reward)."""
CONSTANTS = ("A", "B", "C", "D")
PREFILL = "prefill_s_per_token"
"""The profile's prefill rate (optional: a profile the profiler wrote before it timed prefill)."""


@dataclass(frozen=True)
class ReplicaShape:
    """What a profile depends on besides the engine's code: the key of the profile cache."""

    model_folder: str
    hardware: str
    tp: int
    dtype: str
    attention: str
    backend: str = "embedded"
    engine: str = ""
    """The engine's timing settings (`EngineConfig.timing_key`: paged kernel, block size, decode
    graphs, prefill chunk); '' for a shape named without them (a profile file given by hand)."""

    def key(self) -> str:
        """`<folder name>-<digest>`: the digest covers the folder's config.json (so a folder
        rewritten with another model gets another key), the hardware and the serving shape."""
        folder = Path(self.model_folder)
        config = folder / "config.json"
        content = config.read_bytes() if config.is_file() else str(folder.resolve()).encode()
        parts = [
            hashlib.sha256(content).hexdigest(),
            self.hardware,
            str(self.tp),
            self.dtype,
            self.attention,
            self.backend,
            *([self.engine] if self.engine else []),
        ]
        digest = hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]
        return f"{folder.name or 'model'}-{digest}"

    def cache_file(self, cache_dir: Path) -> Path:
        return Path(cache_dir) / "throughput" / f"{self.key()}.json"


@dataclass(frozen=True)
class RoleProfile:
    """The constants a role plans with and where they came from."""

    model: ThroughputModel
    source: Path
    fallback: bool = False


def hardware_name(device: str) -> str:
    """The hardware part of a profile's key: "cpu", or the CUDA device's name."""
    if not device.startswith("cuda"):
        return "cpu"
    import torch  # only the runtime and the profiler name CUDA hardware; the brains never do

    return torch.cuda.get_device_name(torch.device(device))


def write_profile(path: str | Path, constants: ThroughputModel, /, **meta: Any) -> Path:
    """Write the constants and `meta` (JSON-serialisable; `model` names the folder) to `path` atomically."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    body: dict[str, Any] = {name: getattr(constants, name) for name in CONSTANTS}
    if constants.prefill_s_per_token > 0:
        body[PREFILL] = constants.prefill_s_per_token
    body.update({k: v for k, v in meta.items() if k not in body})
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")  # two jobs may write one profile
    tmp.write_text(json.dumps(body, indent=2) + "\n")
    tmp.replace(out)
    return out


def read_profile(path: str | Path) -> ThroughputModel:
    """The constants in `path`; a one-line error names the file and what is wrong."""
    file = Path(path)
    try:
        body = json.loads(file.read_text())
    except FileNotFoundError:
        raise FileNotFoundError(
            f"throughput profile {file}: no such file (write one with tools/profile_engine.py)"
        ) from None
    except json.JSONDecodeError as e:
        raise ValueError(f"throughput profile {file}: not JSON ({e})") from None
    missing = [k for k in CONSTANTS if not isinstance(body, dict) or k not in body]
    if missing:
        raise ValueError(f"throughput profile {file}: missing {', '.join(missing)}")
    values = [body[k] for k in CONSTANTS]
    if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
        raise ValueError(
            f"throughput profile {file}: A, B, C, D must be finite numbers, got {values}"
        )
    prefill = body.get(PREFILL, 0.0)  # profiles written before prefill was timed have none
    if not (isinstance(prefill, (int, float)) and math.isfinite(prefill)):
        raise ValueError(
            f"throughput profile {file}: {PREFILL} must be a finite number, got {prefill!r}"
        )
    try:
        a, b, c, d = (float(v) for v in values)
        return ThroughputModel(a, b, c, d, float(prefill))
    except ValueError as e:
        raise ValueError(f"throughput profile {file}: {e}") from None


def resolve_profile(
    role: str, configured: str, shape: ReplicaShape | None, cache_dir: Path
) -> RoleProfile:
    """The profile `role` plans with (order in the module docstring). `configured` is the role's
    `throughput_profile` flag; `shape` is None for the embedded tiny models."""
    if role not in TINY_PROFILE:
        raise ValueError(f"role={role!r}: throughput profiles exist for {', '.join(TINY_PROFILE)}")
    if configured:
        return RoleProfile(read_profile(configured), Path(configured))
    if shape is not None:
        cached = shape.cache_file(cache_dir)
        if cached.is_file():
            return RoleProfile(read_profile(cached), cached)
    return RoleProfile(
        read_profile(TINY_PROFILE[role]), TINY_PROFILE[role], fallback=shape is not None
    )
