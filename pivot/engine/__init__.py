"""Pivot's inference engines behind one typed interface.

`InferenceEngine` (protocol.py) is what every backend implements and all its callers use;
`Capabilities` / `capabilities(backend)` (capabilities.py) say what a backend can do, so no
caller compares backend names; `build_engine` (factory.py) builds any backend. The embedded
engine (engine.py: continuous batching, paged KV, TP) lives here, the production adapters
(vLLM, sglang) in backends/, and `ParkedEngine` (parked.py) stands in on a production replica's
follower ranks.

`Engine` and `build_engine` load on first use: `pivot.config` imports `pivot.engine.config`,
which runs this file, and the config tree (the CLI, the simulator, the planner) must not pull
in torch."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pivot.engine.capabilities import Capabilities, capabilities
from pivot.engine.config import EngineConfig
from pivot.engine.parked import ParkedEngine
from pivot.engine.protocol import InferenceEngine
from pivot.engine.sequence import AbortResult, EngineStats, Output, Request, SamplingParams

if TYPE_CHECKING:
    from pivot.engine.engine import Engine
    from pivot.engine.factory import build_engine

__all__ = [
    "AbortResult",
    "Capabilities",
    "Engine",
    "EngineConfig",
    "EngineStats",
    "InferenceEngine",
    "Output",
    "ParkedEngine",
    "Request",
    "SamplingParams",
    "build_engine",
    "capabilities",
]


def __getattr__(name: str) -> Any:
    if name == "Engine":
        from pivot.engine.engine import Engine

        return Engine
    if name == "build_engine":
        from pivot.engine.factory import build_engine

        return build_engine
    raise AttributeError(f"module 'pivot.engine' has no attribute {name!r}")
