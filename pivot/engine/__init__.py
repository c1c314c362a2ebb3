"""Embedded inference engine (continuous batching, paged KV, TP) and the sglang adapter."""
from pivot.engine.config import EngineConfig
from pivot.engine.engine import Engine
from pivot.engine.sequence import AbortResult, EngineStats, Output, Request, SamplingParams

__all__ = ["AbortResult", "Engine", "EngineConfig", "EngineStats", "Output", "Request", "SamplingParams"]
