"""A role's throughput profile measured at start-up, when none is given or cached.

Rank 0 (where the controller plans) builds the role's model with random weights (decode time
does not depend on their values) on its own device, profiles the embedded engine over a small
grid for a few seconds, writes the profile to the cache keyed by model, hardware and TP size
(`pivot.sched.profile.ReplicaShape`), so later runs read it, and frees the device again.
Only a TP=1 replica of the embedded engine is profiled this way (rank 0 alone can hold it);
other shapes plan with the fallback constants unless a file is given.
"""

from __future__ import annotations

import gc
import logging
from pathlib import Path

import torch

from pivot.config import EngineConfig, ModelConfig
from pivot.engine.engine import Engine
from pivot.engine.profiler import profile_engine
from pivot.model import CausalLM, ModelArgs
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


def profile_at_startup(
    role: str,
    shape: ReplicaShape,
    engine_cfg: EngineConfig,
    model_cfg: ModelConfig,
    device: str,
    cache_dir: Path,
) -> ThroughputModel | None:
    """Fit and cache the profile of `role`'s replica shape on `device`; None when this shape
    cannot be profiled here (TP > 1, sglang) or the grid is too small to fit four constants."""
    if shape.tp != 1 or shape.backend != "embedded":
        return None
    args = ModelArgs.load(shape.model_folder)
    seqs, ctxs = startup_grid(engine_cfg, args.max_position_embeddings)
    if len(seqs) * len(ctxs) < 4:
        return None
    cfg = EngineConfig(
        kv_capacity_tokens=max(seqs) * (max(ctxs) + 64) + 1024,
        block_size=engine_cfg.block_size,
        max_running_seqs=max(seqs),
        max_prefill_tokens=engine_cfg.max_prefill_tokens,
    )
    with torch.device(device):
        model = CausalLM(args, linear=model_cfg.linear).to(getattr(torch, model_cfg.dtype))
    engine = Engine(model, cfg, attention=model_cfg.attention, device=device)
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
            tp=1,
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
        del engine, model
        gc.collect()
        if device.startswith("cuda"):
            torch.cuda.empty_cache()
