"""`InferenceEngine`: the one interface every inference backend implements, and all that the
roles, the profiler and the runtime call.

Implemented by the embedded engine (`pivot.engine.engine.Engine`), the production adapters
(`pivot.engine.backends`: vLLM, sglang) and the parked stand-in a production replica's follower
ranks hold (`pivot.engine.parked`). Every backend implements all of it, so callers never ask
which one they hold; what differs between backends is declared in `pivot.engine.capabilities`.
`pivot.engine.factory.build_engine` builds any of them.

Requests are whole (`Request`: prompt plus the tokens a partial brings); an abort keeps the
tokens made so far, so a partial added anywhere continues where it stopped.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from pivot.engine.config import EngineConfig
from pivot.engine.sequence import AbortResult, EngineStats, Output, Request

if TYPE_CHECKING:
    import torch


class InferenceEngine(Protocol):
    config: EngineConfig

    @property
    def max_len(self) -> int:
        """Most tokens (prompt + output) one sequence may hold."""
        ...

    @property
    def vocab_size(self) -> int:
        """Token ids the served model takes."""
        ...

    @property
    def weights_version(self) -> int:
        """The version of the weights loaded last."""
        ...

    @property
    def graphs_capture_s(self) -> float:
        """Seconds spent capturing Pivot's decode graphs so far (0 for a backend that captures none)."""
        ...

    # ---- requests --------------------------------------------------------------------------
    def add(self, request: Request) -> None:
        """Queue a request, or a partial from `abort`, which continues where it stopped."""
        ...

    def add_all(self, requests: list[Request]) -> None:
        """`add` each (under the embedded engine's TP with KV migration, a collective)."""
        ...

    def step(self) -> list[Output]:
        """One engine step; returns the sequences that finished in it."""
        ...

    def has_work(self) -> bool: ...

    def progress(self) -> dict[int, int]:
        """Tokens generated so far by each unfinished sequence."""
        ...

    def abort(self, ids: Iterable[int]) -> AbortResult:
        """Stop sequences; each partial keeps its tokens (and log-probs, version ranges)."""
        ...

    def can_admit(self, num_tokens: int) -> bool:
        """Whether a sequence of `num_tokens` tokens fits the free KV cache now."""
        ...

    def stats(self) -> EngineStats: ...

    # ---- weights and memory ----------------------------------------------------------------
    def weight_buffers(self) -> dict[str, torch.Tensor]:
        """Tensors a GPS Read may fill in place (HF-named); empty when Reads come in fresh."""
        ...

    def load_weights(
        self,
        named_tensors: dict[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]],
        version: int,
    ) -> None:
        """New weights, HF-named, also while requests run: they continue with them in flight."""
        ...

    def named_parameters_hf(self) -> dict[str, torch.Tensor]:
        """The served weights, whole and HF-named (where `returns_whole_weights`)."""
        ...

    def release(self) -> AbortResult:
        """Shift down: abort everything (partials keep their tokens), free weights and KV cache."""
        ...

    def resume(self) -> None:
        """Shift up: storage again; `load_weights` follows."""
        ...

    def shutdown(self) -> None:
        """Stop what the engine runs (its processes); nothing for an in-process engine."""
        ...

    def salvage(self) -> list[Request]:
        """After the engine failed (an error from any call above): every request it held, with
        the tokens made so far and no K/V, for another replica to continue; it holds none after.
        Reads only what the engine kept on this side, so it works on a dead engine."""
        ...
