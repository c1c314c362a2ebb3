"""Embedded inference engine (continuous batching, paged KV, TP) and the sglang adapter.

`Engine` loads on first use: `pivot.config` imports `pivot.engine.config`, which runs this file,
and the config tree (the CLI, the simulator, the planner) must not pull in torch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pivot.engine.config import EngineConfig
from pivot.engine.sequence import AbortResult, EngineStats, Output, Request, SamplingParams

if TYPE_CHECKING:
    from pivot.engine.engine import Engine

__all__ = [
    "AbortResult",
    "Engine",
    "EngineConfig",
    "EngineStats",
    "Output",
    "Request",
    "SamplingParams",
]


def __getattr__(name: str) -> Any:
    if name == "Engine":
        from pivot.engine.engine import Engine

        return Engine
    raise AttributeError(f"module 'pivot.engine' has no attribute {name!r}")
