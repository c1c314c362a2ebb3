"""`ParkedEngine`: what a follower rank of a production engine's replica holds.

A production engine (`Capabilities.owns_processes`) serves its whole replica from the leader
rank, running its own processes on the replica's devices. The other ranks of the slot keep their
CUDA context and process groups and follow the leader's lockstep, with nothing to serve: their
engine takes no requests, makes nothing, reads no weights and releases nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from pivot.engine.config import EngineConfig
from pivot.engine.sequence import AbortResult, EngineStats, Output, Request

if TYPE_CHECKING:
    import torch


class ParkedEngine:
    def __init__(self, config: EngineConfig | None = None) -> None:
        self.config = config or EngineConfig()
        self._version = 0

    @property
    def max_len(self) -> int:
        return 0

    @property
    def vocab_size(self) -> int:
        return 0

    @property
    def weights_version(self) -> int:
        return self._version

    @property
    def graphs_capture_s(self) -> float:
        return 0.0

    def add(self, request: Request) -> None:
        raise RuntimeError(f"request {request.id}: a parked rank serves nothing (its leader does)")

    def add_all(self, requests: list[Request]) -> None:
        for request in requests:
            self.add(request)

    def step(self) -> list[Output]:
        return []

    def has_work(self) -> bool:
        return False

    def progress(self) -> dict[int, int]:
        return {}

    def abort(self, ids: Iterable[int]) -> AbortResult:
        return AbortResult([], list(ids))

    def can_admit(self, num_tokens: int) -> bool:
        return False

    def stats(self) -> EngineStats:
        return EngineStats(
            n_seq=0,
            n_tok=0,
            kv_free_tokens=0,
            kv_total_tokens=0,
            tokens_generated=0,
            last_step_latency_s=0.0,
            weights_version=self._version,
        )

    def weight_buffers(self) -> dict[str, torch.Tensor]:
        return {}  # its Read holds nothing: the leader's brings the model

    def load_weights(
        self,
        named_tensors: dict[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]],
        version: int,
    ) -> None:
        self._version = version

    def named_parameters_hf(self) -> dict[str, torch.Tensor]:
        return {}  # serves no weights: its checksum is 0

    def release(self) -> AbortResult:
        return AbortResult([], [])

    def resume(self) -> None:
        pass

    def shutdown(self) -> None:
        pass

    def salvage(self) -> list[Request]:
        return []
