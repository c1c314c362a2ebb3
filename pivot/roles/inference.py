"""Rollout and reward replicas: an engine (`pivot.engine.InferenceEngine`, any backend) whose
parameters come from GPS.

Context categories (docs/ARCHITECTURE.md, "What a shift moves"): on shift down the KV cache
(temporary) and the parameters are discarded (`release`); the engine object, its process
group and descriptors are preserved. On shift up the engine re-allocates (`resume`) and the GPS
Read fills this rank's TP slices straight into the engine's parameters. The embedded engine's
model is built on the meta device, so only this rank's slices ever get storage, and no second
copy of them is made. One engine per slot this rank has held, so a rank that returns to a slot
finds its preserved context. Rollout and reward differ only in which model they serve.

A backend that `owns_processes` (sglang on GPUs, vLLM on GPUs and on CPU with vLLM's CPU
build) is one engine for the whole replica, built by the slot's leader (group rank 0) with TP
size = the slot's ranks, on the leader's local device and the ones after it (slots are
consecutive devices of one host); it runs its own processes on the slot's devices. The other
ranks of the slot are parked (`pivot.engine.ParkedEngine`): they keep their CUDA context and
process groups, follow the leader's lockstep (a step of a parked rank does nothing). The
leader's GPS Read brings the whole model (`reads_whole_model`: the engine shards it itself,
`pivot.runtime.weights.service`); shift down is abort (partials keep their tokens) + release, shift up
is resume + the Read handed to the engine (`update_weights_from_tensor` for sglang, a shm file
the Read fills in place for vLLM).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from pivot.config import EngineConfig, ModelConfig
from pivot.engine import AbortResult, EngineStats, InferenceEngine, Output, Request, capabilities
from pivot.engine.factory import KVMigration, build_engine
from pivot.engine.failed import FailedEngine
from pivot.engine.kv_transport import KVPlace
from pivot.model import TextTokenizer

log = logging.getLogger(__name__)

Read = Callable[[dict[str, torch.Tensor]], tuple[dict[str, torch.Tensor], int]]


class InferenceRole:
    def __init__(
        self,
        *,
        role: str,
        model_path: Path,
        engine_cfg: EngineConfig,
        model_cfg: ModelConfig,
        device: str,
        seed: int,
        local_device: int = 0,
        kv_prefix: str = "",
        kv_place: KVPlace | None = None,
    ) -> None:
        """`local_device`: this rank's device index on its host (an sglang replica's base_gpu_id when it leads);
        `kv_prefix`: where embedded engines export migrated sequences' KV (host shm; "" = re-prefill);
        `kv_place`: this rank's host, device kind and NIXL link (which transports reach it)."""
        self.role, self.model_path = role, Path(model_path)
        self.engine_cfg, self.model_cfg, self.device, self.seed = (
            engine_cfg,
            model_cfg,
            device,
            seed,
        )
        self.local_device = local_device
        self.capabilities = capabilities(engine_cfg.backend)
        self.kv_prefix, self.kv_place = kv_prefix, kv_place
        # only a backend that migrates KV imports Pivot's KV handles (docs/kv_migration.md)
        self.kv_migration = bool(kv_prefix) and self.capabilities.migrates_kv
        tok = self.model_path / "tokenizer.json"
        self.tokenizer = TextTokenizer.from_pretrained(self.model_path) if tok.is_file() else None
        self.engines: dict[int, InferenceEngine] = {}  # slot -> its engine on this rank
        self.slot: int | None = None
        self.failed: set[int] = set()  # slots whose engine failed: built anew on the next shift up

    @property
    def engine(self) -> InferenceEngine:
        assert self.slot is not None, f"{self.role} role is not up on this rank"
        return self.engines[self.slot]

    def shift_up(
        self, slot: int, group: dist.ProcessGroup | None, read: Read
    ) -> tuple[int, dict[str, float]]:
        """Take slot `slot`: its engine (built the first time, else resumed) gets storage, and
        `read` (a GPS Read) fills it: in place for the embedded engine (this rank's TP slices),
        whole tensors for a production engine's leader, nothing for a parked rank (it returns
        the version).
        Returns the version and phase timings (s)."""
        t0 = time.perf_counter()
        if slot not in self.engines or slot in self.failed:
            self.engines[slot] = self._build(group, slot)
            self.failed.discard(slot)
        else:
            self.engines[slot].resume()
        self.slot = slot
        t1 = time.perf_counter()
        graphs_before = self._capture_s()
        version, read_s = self.update_weights(read)  # the embedded engine captures no graph
        graphs_s = self._capture_s() - graphs_before  # here (0 s): its buckets after, as reached
        return version, {
            "allocate": t1 - t0,
            "gps_read": read_s,
            "load": time.perf_counter() - t1 - read_s - graphs_s,
            "graphs": graphs_s,
        }

    def _capture_s(self) -> float:
        """Seconds this rank's engine has spent capturing Pivot's decode graphs."""
        return 0.0 if self.slot is None else self.engine.graphs_capture_s

    def _build(self, group: dist.ProcessGroup | None, slot: int) -> InferenceEngine:
        stem = f"{self.kv_prefix}_{self.role}{slot}"
        kv = (
            KVMigration(stem, self.kv_place, f"kv/{stem.rsplit('/', 1)[-1]}")
            if self.kv_migration
            else None
        )
        return build_engine(
            self.model_path,
            self.engine_cfg,
            tp_group=group,
            base_gpu_id=self.local_device,
            tokenizer=self.tokenizer,
            dtype=self.model_cfg.dtype,
            attention=self.model_cfg.attention,
            linear=self.model_cfg.linear,
            device=self.device,
            seed=self.seed,
            weights="later",
            kv=kv,
        )

    def update_weights(self, read: Read) -> tuple[int, float]:
        """New weights between engine steps: `read` fills the engine's parameters in place (see
        `shift_up`); returns the version and the seconds `read` took."""
        if self.slot in self.failed:  # nothing to serve them until the slot is rebuilt
            return self.engine.weights_version, 0.0
        buffers = self.engine.weight_buffers()
        t0 = time.perf_counter()
        tensors, version = read(buffers)
        read_s = time.perf_counter() - t0
        self.engine.load_weights(
            {**buffers, **tensors}, version
        )  # validates; slices what came whole
        return version, read_s

    # ---- the engine, as the worker loop drives it ------------------------------------------
    def add(self, requests: list[Request]) -> None:
        """Queue requests; with KV migration on, every rank of the slot calls this (a lockstep
        collective when a request brings KV: each rank copies its own slice)."""
        self.engine.add_all(requests)

    def abort(self, ids: list[int]) -> AbortResult:
        """Stop `ids`; with KV migration on, every rank of the slot calls this (each exports its
        slice) and only the leader's result holds the partials."""
        return self.engine.abort(ids)

    def step(self) -> list[Output]:
        return self.engine.step()

    def has_work(self) -> bool:
        return self.slot is not None and self.engine.has_work()

    def stats(self) -> tuple[EngineStats, dict[int, int]]:
        """The engine's counters and each running sequence's generated-token count."""
        return self.engine.stats(), self.engine.progress()

    def shift_down(self, fence: Any = None) -> tuple[AbortResult, dict[str, float]]:
        """Abort what is left (the controller aborted and migrated it already) and release.

        `fence`: the slot's device-free group (`pivot.dist.fence_name`). A production engine's
        leader releases the devices of every rank of its replica, while a parked rank has
        nothing to release and would otherwise take its next role at once, allocating on a
        device where the engine's worker is still inside its release; vLLM's `sleep(level=2)`
        asserts that device-wide free memory did not drop meanwhile (vllm 0.32.0,
        v1/worker/gpu_worker.py:294-325), and the failed call leaves the engine unable to wake
        (v1/executor/abstract.py:382-396). So every rank of such a replica meets at the fence
        after the leader's release: a gloo barrier, which touches no device."""
        t0 = time.perf_counter()
        partials = self.engine.release()
        if self.capabilities.owns_processes and fence is not None:
            dist.barrier(group=fence)
        self.slot = None
        return partials, {"release": time.perf_counter() - t0}

    def recovers_in_place(self, slot_ranks: int) -> bool:
        """Whether an engine failure on this rank can be recovered without a restart: a replica
        of one rank, or one whose engine owns its processes (its other ranks are parked). The
        embedded engine's TP ranks run collectives in lockstep, which a failed rank leaves
        hanging: that failure restarts the job."""
        return slot_ranks == 1 or self.capabilities.owns_processes

    def fail(self, error: str) -> int:
        """The engine of the slot held now failed: salvage what it held (tokens kept, K/V lost),
        stop what it runs, and hold a `FailedEngine` in its place until the slot shifts down
        and is rebuilt. Returns how many requests were salvaged."""
        assert self.slot is not None, f"{self.role} role is not up on this rank"
        engine = self.engine
        try:
            held = engine.salvage()
        except Exception:  # an engine too broken to say: its sequences start again elsewhere
            log.exception("%s%d: salvage failed", self.role, self.slot)
            held = []
        try:
            engine.shutdown()
        except Exception:
            log.exception("%s%d: shutdown of the failed engine failed", self.role, self.slot)
        version = engine.weights_version
        self.engines[self.slot] = FailedEngine(self.engine_cfg, held, version, error)
        self.failed.add(self.slot)
        return len(held)

    def close(self) -> None:
        """Stop the engines (those that run processes of their own stop them)."""
        for engine in self.engines.values():
            engine.shutdown()
        self.engines, self.slot = {}, None

    def checksum(self) -> float:
        """Sum of the weights this rank serves (0 when parked)."""
        return float(sum(t.double().sum() for t in self.engine.named_parameters_hf().values()))
