"""`FailedEngine`: what a replica's rank holds from the moment its engine failed until the replica
has shifted down.

The failed engine's requests were salvaged with the tokens they had (`InferenceEngine.salvage`);
this stand-in holds them, and any request the controller sent before it heard of the failure, and
hands them back as any engine hands back partials: through `abort` (the scheduler migrating them
off) and `release` (the shift down). It makes nothing, admits nothing and reads no weights; it
cannot resume: the role builds a new engine on the slot's next shift up.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import TYPE_CHECKING

from pivot.engine.config import EngineConfig
from pivot.engine.parked import ParkedEngine
from pivot.engine.sequence import AbortResult, EngineStats, Output, Request

if TYPE_CHECKING:
    import torch


class FailedEngine:
    """An `InferenceEngine` that serves nothing, reads and releases no device (as a parked rank's
    engine, which it holds for those answers) and holds requests."""

    def __init__(self, config: EngineConfig, held: list[Request], version: int, error: str) -> None:
        self.config, self.error = config, error
        self.parked = ParkedEngine(config)
        self.parked.load_weights({}, version)  # a parked engine keeps only the version it is given
        self.held: dict[int, Request] = {r.id: r for r in held}

    # what a parked rank answers: no capacity, no output, no weights ---------------------------
    @property
    def max_len(self) -> int:
        return self.parked.max_len

    @property
    def vocab_size(self) -> int:
        return self.parked.vocab_size

    @property
    def weights_version(self) -> int:
        return self.parked.weights_version

    @property
    def graphs_capture_s(self) -> float:
        return self.parked.graphs_capture_s

    def step(self) -> list[Output]:
        return self.parked.step()

    def has_work(self) -> bool:
        return self.parked.has_work()

    def can_admit(self, num_tokens: int) -> bool:
        return self.parked.can_admit(num_tokens)

    def weight_buffers(self) -> dict[str, torch.Tensor]:
        return self.parked.weight_buffers()

    def named_parameters_hf(self) -> dict[str, torch.Tensor]:
        return self.parked.named_parameters_hf()

    def shutdown(self) -> None:
        self.parked.shutdown()

    # what it holds: the salvaged requests and any sent since, handed back as partials ---------
    def add(self, request: Request) -> None:
        self.held.setdefault(request.id, request)  # sent before the controller knew: kept as is

    def add_all(self, requests: list[Request]) -> None:
        for request in requests:
            self.add(request)

    def progress(self) -> dict[int, int]:
        return {rid: len(r.output_ids) for rid, r in self.held.items()}

    def abort(self, ids: Iterable[int]) -> AbortResult:
        partials, unknown = [], []
        for rid in ids:
            req = self.held.pop(rid, None)
            if req is None:
                unknown.append(rid)
            else:
                partials.append(req)
        return AbortResult(partials, unknown)

    def stats(self) -> EngineStats:
        return dataclasses.replace(
            self.parked.stats(),
            n_seq=len(self.held),
            n_tok=sum(len(r.prompt_ids) + len(r.output_ids) for r in self.held.values()),
        )

    def load_weights(
        self,
        named_tensors: dict[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]],
        version: int,
    ) -> None:
        pass  # nothing serves them: the rebuilt engine reads its own on the way up

    def release(self) -> AbortResult:
        return AbortResult(self.salvage(), [])

    def resume(self) -> None:
        raise RuntimeError(f"a failed engine cannot resume ({self.error}): build a new one")

    def salvage(self) -> list[Request]:
        out, self.held = list(self.held.values()), {}
        return out
