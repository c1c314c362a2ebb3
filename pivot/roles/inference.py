"""Rollout and reward replicas: an embedded (or sglang) engine whose parameters come from GPS.

Context categories (DESIGN.md): on shift down the KV cache (temporary) and the parameters
are discarded (`Engine.release`); the engine object, its process group and descriptors are
preserved. On shift up the engine re-allocates (`resume`) and the GPS Read fills this rank's TP
slices straight into the engine's parameters. The model is built on the meta device, so only
this rank's slices ever get storage, and no second copy of them is made. One engine per slot
this rank has held, so a rank that returns to a slot finds its preserved context. Rollout and
reward differ only in which model they serve.
"""
from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import torch

from pivot.config import EngineConfig, ModelConfig
from pivot.engine import AbortResult, Engine, EngineStats, Output, Request
from pivot.model import CausalLM, ModelArgs, TextTokenizer
from pivot.model.meta_init import params_on_meta


class InferenceRole:
    def __init__(self, role: str, model_path: Path, engine_cfg: EngineConfig, model_cfg: ModelConfig, device: str, seed: int) -> None:
        self.role, self.model_path = role, Path(model_path)
        self.engine_cfg, self.model_cfg, self.device, self.seed = engine_cfg, model_cfg, device, seed
        self.args = ModelArgs.load(self.model_path)
        tok = self.model_path / "tokenizer.json"
        self.tokenizer = TextTokenizer.from_pretrained(self.model_path) if tok.is_file() else None
        self.engines: dict[int, Engine] = {}
        self.slot: int | None = None

    @property
    def engine(self) -> Engine:
        assert self.slot is not None, f"{self.role} role is not up on this rank"
        return self.engines[self.slot]

    def shift_up(
        self, slot: int, group: object, read: Callable[[dict[str, torch.Tensor]], tuple[dict[str, torch.Tensor], int]]
    ) -> tuple[int, dict[str, float]]:
        """Take slot `slot`: its engine (built on the meta device the first time, else resumed)
        gets storage for this rank's TP slices only, and `read` (a GPS Read) fills those tensors
        in place and returns what it read (full tensors where GPS keeps a tensor whole) and the
        version. Returns the version and phase timings (s)."""
        t0 = time.perf_counter()
        if slot not in self.engines:
            with torch.device(self.device), params_on_meta():  # storage comes with the TP slice
                model = CausalLM(self.args, linear=self.model_cfg.linear).to(getattr(torch, self.model_cfg.dtype))
            self.engines[slot] = Engine(
                model, self.engine_cfg, tp_group=group, tokenizer=self.tokenizer,
                attention=self.model_cfg.attention, seed=self.seed, device=self.device,
            )
        else:
            self.engines[slot].resume()
        self.slot = slot
        t1 = time.perf_counter()
        version, read_s = self.update_weights(read)
        return version, {"allocate": t1 - t0, "gps_read": read_s, "load": time.perf_counter() - t1 - read_s}

    def update_weights(self, read: Callable[[dict[str, torch.Tensor]], tuple[dict[str, torch.Tensor], int]]) -> tuple[int, float]:
        """New weights between engine steps: `read` fills the engine's parameters in place (see
        `shift_up`); returns the version and the seconds `read` took."""
        buffers = self.engine.weight_buffers()
        t0 = time.perf_counter()
        tensors, version = read(buffers)
        read_s = time.perf_counter() - t0
        self.engine.load_weights({**buffers, **tensors}, version)  # validates; slices what came whole
        return version, read_s

    # ---- the engine, as the worker loop drives it ------------------------------------------
    def add(self, requests: list[Request]) -> None:
        for req in requests:
            self.engine.add(req)

    def abort(self, ids: list[int]) -> AbortResult:
        return self.engine.abort(ids)

    def step(self) -> list[Output]:
        return self.engine.step()

    def has_work(self) -> bool:
        return self.slot is not None and self.engine.has_work()

    def stats(self) -> tuple[EngineStats, dict[int, int]]:
        """The engine's counters and each running sequence's generated-token count."""
        return self.engine.stats(), self.engine.progress()

    def shift_down(self) -> tuple[AbortResult, dict[str, float]]:
        """Abort what is left (the controller aborted and migrated it already) and release."""
        t0 = time.perf_counter()
        partials = self.engine.release()
        self.slot = None
        return partials, {"release": time.perf_counter() - t0}

    def checksum(self) -> float:
        return float(sum(t.double().sum() for t in self.engine.named_parameters_hf().values()))
