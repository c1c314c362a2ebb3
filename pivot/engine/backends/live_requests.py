"""What a production engine's adapter (vLLM, sglang) knows of the requests it has sent in: each
one's tokens and log-probs as streamed back, and the protocol's bookkeeping over them (work,
progress, admission against the KV capacity, stats): `LiveRequests`, a part each adapter holds.
The engine itself holds the K/V."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Generic, TypeVar

from pivot.engine.sequence import EngineStats, Request, VersionRanges


@dataclass
class LiveRequest:
    request: Request
    output_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    added_version: int = 0
    """The engine's weights version when it was added: no token made here is older."""
    marks: list[tuple[int, int]] = field(default_factory=list, kw_only=True)
    """(version, index in `output_ids`) of each update the request ran through in place: the
    tokens from the index on came from that version or a newer one."""

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


L = TypeVar("L", bound=LiveRequest)


class LiveRequests(Generic[L]):
    """The requests an adapter has sent in (id -> its `LiveRequest`) and the counters over them;
    the adapter answers the protocol's work, progress, admission and stats questions from here,
    with the KV capacity, max length and weights version it knows."""

    def __init__(self) -> None:
        self.live: dict[int, L] = {}
        self.tokens_generated = 0
        self.last_latency = 0.0

    def has_work(self) -> bool:
        return bool(self.live)

    def progress(self) -> dict[int, int]:
        """Tokens generated so far by each running request (as streamed back so far)."""
        return {rid: len(live.output_ids) for rid, live in self.live.items()}

    def n_tok(self) -> int:
        return sum(len(lv.request.prompt_ids) + len(lv.output_ids) for lv in self.live.values())

    def can_admit(self, num_tokens: int, max_len: int, kv_total: int) -> bool:
        return num_tokens < max_len and self.n_tok() + num_tokens <= kv_total

    def stats(self, kv_total: int, version: int) -> EngineStats:
        n_tok = self.n_tok()
        return EngineStats(
            n_seq=len(self.live),
            n_tok=n_tok,
            kv_free_tokens=max(kv_total - n_tok, 0),
            kv_total_tokens=kv_total,
            tokens_generated=self.tokens_generated,
            last_step_latency_s=self.last_latency,
            weights_version=version,
        )
