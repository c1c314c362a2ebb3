"""What a production engine's adapter (vLLM, sglang) knows of the requests it has sent in: each
one's tokens and log-probs as streamed back, with the backend's own hold on it (`LiveRequest`),
and the half of the protocol every adapter answers the same way from them (work, progress,
admission against the KV capacity, stats, the weights version, the checks on a new request):
`LiveRequests`, which each adapter holds and forwards those calls to. The engine itself holds
the K/V."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

from pivot.engine.sequence import EngineStats, Request, VersionRanges

H = TypeVar("H")


@dataclass
class LiveRequest(Generic[H]):
    request: Request
    handle: H
    """The backend's own hold on the request (vLLM: its request key; sglang: its stream)."""
    added_version: int
    """The engine's weights version when it was added: no token made here is older."""
    output_ids: list[int] = field(init=False)
    """The request's tokens so far, then those streamed back since it was added."""
    logprobs: list[float] = field(init=False)
    marks: list[tuple[int, int]] = field(default_factory=list, kw_only=True)
    """(version, index in `output_ids`) of each update the request ran through in place: the
    tokens from the index on came from that version or a newer one."""

    def __post_init__(self) -> None:
        self.output_ids = list(self.request.output_ids)
        self.logprobs = list(self.request.output_logprobs)

    def mark(self, version: int) -> None:
        self.marks.append((version, len(self.output_ids)))

    def so_far(self) -> Request:
        """The request with the tokens made so far; those made here are labelled with the version
        it was added under (never newer than theirs), then each in-place update's from its mark,
        after the ranges it arrived with."""
        req, done = self.request, len(self.request.output_ids)
        n = len(self.output_ids)
        made = VersionRanges(((self.added_version, done),) if n > done else ())
        for version, at in self.marks:
            if at < n:
                made = made.before(at).extended([(version, max(at, done))])
        return Request(
            req.id,
            list(req.prompt_ids),
            req.params,
            self.output_ids,
            self.logprobs,
            versions=req.versions.extended(made.starts),
        )


class LiveRequests(Generic[H]):
    """An adapter's requests in flight (`live`: id -> its `LiveRequest`) and the counters over
    them, with the engine's KV capacity and max length (set by the adapter once its engine is up)
    and the weights version it serves (set by its `load_weights`). The adapter sends requests,
    steps, aborts and moves weights and memory its engine's way, and keeps this bookkeeping up
    to date as it does; everything the protocol answers from the requests alone is here, once,
    and the adapter forwards it."""

    def __init__(self) -> None:
        self.live: dict[int, LiveRequest[H]] = {}
        self.tokens_generated = 0
        self.last_latency = 0.0
        self.kv_total = 0
        self.max_len = 0
        self.version = 0

    def check_new(self, request: Request, max_len: int) -> int:
        """The request's token count, or ValueError naming why this engine cannot take it."""
        if request.id in self.live:
            raise ValueError(f"request {request.id}: id is already in this engine")
        if not request.prompt_ids:
            raise ValueError(f"request {request.id}: prompt_ids is empty")
        n = len(request.prompt_ids) + len(request.output_ids)
        if n >= max_len:
            raise ValueError(
                f"request {request.id}: {n} tokens exceed the engine's max length {max_len}"
            )
        if len(request.output_ids) >= request.params.max_new_tokens:
            raise ValueError(f"request {request.id}: already has max_new_tokens tokens")
        return n

    def salvage(self) -> list[Request]:
        """After a failure: each request with the tokens streamed back before it (`so_far`)."""
        out = [live.so_far() for live in self.live.values()]
        self.live.clear()
        return out

    def has_work(self) -> bool:
        return bool(self.live)

    def progress(self) -> dict[int, int]:
        """Tokens generated so far by each running request (as streamed back so far)."""
        return {rid: len(live.output_ids) for rid, live in self.live.items()}

    def n_tok(self) -> int:
        return sum(len(lv.request.prompt_ids) + len(lv.output_ids) for lv in self.live.values())

    def can_admit(self, num_tokens: int) -> bool:
        return num_tokens < self.max_len and self.n_tok() + num_tokens <= self.kv_total

    def stats(self) -> EngineStats:
        n_tok = self.n_tok()
        return EngineStats(
            n_seq=len(self.live),
            n_tok=n_tok,
            kv_free_tokens=max(self.kv_total - n_tok, 0),
            kv_total_tokens=self.kv_total,
            tokens_generated=self.tokens_generated,
            last_step_latency_s=self.last_latency,
            weights_version=self.version,
        )
