"""The optional GPU kernels a config asks for, checked at start-up: `--model.attention flash`
needs flash-attn, `--model.linear te` needs transformer-engine. Neither is on the package
registry as a wheel for torch 2.14 / CUDA 13; both build from source (docs/gpu.md). A missing or
broken one stops the run before torchrun work starts, naming what to install: nothing falls
back to another kernel silently."""

from __future__ import annotations

import importlib

from pivot.config import ModelConfig

KERNELS = {
    "flash": (
        "flash_attn",
        "flash_attn_varlen_func",
        "--model.attention flash",
        "flash-attn==2.8.3",
    ),
    "te": (
        "transformer_engine.pytorch",
        "Linear",
        "--model.linear te",
        "transformer-engine[pytorch]==2.9.0",
    ),
}
"""kernel -> (module, attribute Pivot calls, the flag that asks for it, what to install)."""


def missing_kernels(model: ModelConfig) -> list[str]:
    """One line per kernel the config asks for that does not import (empty: all present)."""
    wanted = [
        k for k, on in (("flash", model.attention == "flash"), ("te", model.linear == "te")) if on
    ]
    out = []
    for kernel in wanted:
        module, attr, flag, package = KERNELS[kernel]
        try:
            getattr(importlib.import_module(module), attr)
        except Exception as e:  # ImportError, an ABI mismatch (OSError), a missing symbol
            out.append(
                f"{flag} needs {package} (import {module}.{attr} failed: {type(e).__name__}: "
                f"{str(e).splitlines()[0][:200] if str(e) else ''}); build it from source as docs/gpu.md says, "
                f"or drop the flag"
            )
    return out
