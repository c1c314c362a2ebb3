"""A role's throughput profile measured at start-up, when none is given or cached.

Rank 0 (where the controller plans) builds the role's engine with random weights (decode time
does not depend on their values) on its own device, profiles it over a small grid for a few
seconds (`pivot.engine.profiler`, through the engine protocol), writes the profile to the cache
keyed by model, hardware, TP size and backend (`pivot.sched.profile.ReplicaShape`), so later runs
read it, and frees the device again. The embedded engine is profiled at TP 1 only (a TP group
needs the replica's other ranks); a production engine (vLLM, sglang) at the replica's TP size,
on this host's devices from rank 0's on (it starts its own processes there, with its dummy
weights).
"""

from __future__ import annotations

import dataclasses
import gc
import logging
from pathlib import Path

import torch

from pivot.config import EngineConfig, ModelConfig
from pivot.engine import InferenceEngine, capabilities
from pivot.engine.factory import build_engine
from pivot.engine.profiler import profile_engine
from pivot.model.hf_folder import text_config
from pivot.sched.profile import ReplicaShape
from pivot.sched.throughput import ThroughputModel

SEQS = (1, 4, 16, 64)
"""N_seq points (capped by the role's max_running_seqs, which is always one of them)."""
CTXS = (64, 256, 1024)
"""Context points in tokens (capped by the model's max length)."""
STEPS = 3
"""Decode steps timed per point (the fastest is kept)."""
log = logging.getLogger(__name__)


def startup_grid(engine_cfg: EngineConfig, max_len: int) -> tuple[list[int], list[int]]:
    top = min(max(SEQS), engine_cfg.max_running_seqs)
    seqs = sorted({n for n in SEQS if n < top} | {top})
    room = max_len - STEPS - 3
    ctxs = sorted({c for c in CTXS if c <= room} | ({min(CTXS[0], room)} if room > 0 else set()))
    return seqs, ctxs


def profiled_config(engine_cfg: EngineConfig, seqs: list[int], ctxs: list[int]) -> EngineConfig:
    """The role's engine as it serves (backend, paged kernel, block size, decode graphs, prefill
    chunk, every other field), with only its KV capacity and running-sequence cap sized to the
    grid: the constants the planner reads must describe the path that serves."""
    return dataclasses.replace(
        engine_cfg,
        kv_capacity_tokens=max(seqs) * (max(ctxs) + 256)
        + 1024,  # room for blocks of 128 (vLLM, CPU)
        max_running_seqs=max(seqs),
    )


def profile_at_startup(
    role: str,
    shape: ReplicaShape,
    engine_cfg: EngineConfig,
    model_cfg: ModelConfig,
    device: str,
    cache_dir: Path,
) -> ThroughputModel | None:
    """Fit and cache the profile of `role`'s replica shape on `device`; None when this shape
    cannot be profiled here (the embedded engine at TP > 1) or the grid is too small to fit four
    constants."""
    if not capabilities(shape.backend).owns_processes and shape.tp != 1:
        return None  # a TP group needs the replica's other ranks
    seqs, ctxs = startup_grid(
        engine_cfg, int(text_config(shape.model_folder).get("max_position_embeddings", 4096))
    )
    if len(seqs) * len(ctxs) < 4:
        return None
    cfg = profiled_config(engine_cfg, seqs, ctxs)
    try:
        engine = _engine(shape, cfg, model_cfg, device)
    except (RuntimeError, ValueError) as e:
        log.warning("%s: could not start a %s engine to profile: %s", role, shape.backend, e)
        return None
    try:
        return profile_engine(
            engine,
            shape.cache_file(cache_dir),
            seqs,
            ctxs,
            STEPS,
            passes=1,
            role=role,
            model=shape.model_folder,
            hardware=shape.hardware,
            tp=shape.tp,
            backend=shape.backend,
            dtype=shape.dtype,
            attention=shape.attention,
            source="start-up profile",
        )
    except (
        RuntimeError,
        ValueError,
    ) as e:  # a profile is an optimisation: plan with the fallback instead
        log.warning("%s: start-up throughput profile of %s failed: %s", role, shape.model_folder, e)
        return None
    finally:
        engine.shutdown()
        del engine
        gc.collect()
        if device.startswith("cuda"):
            torch.cuda.empty_cache()


def _engine(
    shape: ReplicaShape, cfg: EngineConfig, model_cfg: ModelConfig, device: str
) -> InferenceEngine:
    """The replica's engine with random weights: the embedded one built here, a production
    engine with the dummy weights it starts with."""
    return build_engine(
        shape.model_folder,
        cfg,
        tp_size=shape.tp,
        dtype=model_cfg.dtype,
        attention=model_cfg.attention,
        linear=model_cfg.linear,
        device=device,
        weights="random",
    )
