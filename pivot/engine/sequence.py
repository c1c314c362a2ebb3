"""Records of the engine protocol (requests, outputs, stats) and the per-sequence state.

Pure Python: the scheduler and the block manager work on these without torch.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    """0 means greedy."""
    top_p: float = 1.0
    top_k: int = 0
    """0 disables top-k."""
    max_new_tokens: int = 256
    """Cap on generated tokens, counting tokens generated before an abort."""
    seed: int | None = None
    """Per-request seed: sampling depends only on (seed, tokens generated so far)."""
    stop: tuple[str, ...] = ()
    """Stop strings (need the engine's tokenizer); the token completing one is kept."""
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if self.temperature < 0:
            raise ValueError(f"SamplingParams.temperature={self.temperature} must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams.top_p={self.top_p} must be in (0, 1]")
        if self.top_k < 0:
            raise ValueError(f"SamplingParams.top_k={self.top_k} must be >= 0")
        if self.max_new_tokens < 1:
            raise ValueError(f"SamplingParams.max_new_tokens={self.max_new_tokens} must be >= 1")
        object.__setattr__(self, "stop", tuple(self.stop))


@dataclass(frozen=True)
class VersionRanges:
    """Which weights version made which of a sequence's generated tokens: the one record every
    place reads a sequence's versions from (the engines label with it, the controller and the
    RL flow take its oldest for the staleness bound, the trainer's mismatch figures split by it).

    A weights version is a plain int, the policy version (training steps done; the GenRM's is 0):
    the staleness bound subtracts it from a step count, so it stays an int rather than a type."""

    starts: tuple[tuple[int, int], ...] = ()
    """(version, index in the output tokens of the first token it made), in the order made:
    `version` made the tokens from its index up to the next entry's."""

    def oldest(self, current: int) -> int:
        """The oldest version that made any of the tokens (`current` if none was made yet)."""
        return min((v for v, _ in self.starts), default=current)

    def made(self, version: int, at: int) -> VersionRanges:
        """With the token at index `at` made by `version` (a new range only where it changes)."""
        if self.starts and self.starts[-1][0] == version:
            return self
        return VersionRanges((*self.starts, (version, at)))

    def extended(self, more: Iterable[tuple[int, int]]) -> VersionRanges:
        """With the ranges `more` (later tokens' starts) appended as they are."""
        return VersionRanges((*self.starts, *((int(v), int(i)) for v, i in more)))

    def before(self, at: int) -> VersionRanges:
        """Only the ranges starting before token index `at`."""
        return VersionRanges(tuple(s for s in self.starts if s[1] < at))


REFUSALS = ("stale", "no_room", "other_tp", "other_layout", "unreachable", "released", "bad_length")
"""Why a destination refuses a KV handle (`KVPorter.refusal`), each counted apart:
- stale: the K/V were computed with other weights (a rollout replica updated its policy in
  between): recomputing is the exact choice, not a shortcoming;
- no_room: too few free KV blocks for the imported tokens now (a full destination);
- other_tp / other_layout: the destination's TP size or cache layout (layers, heads per rank,
  head dim, dtype) differs from the source's, so its ranks' slices do not match;
- unreachable: no transport reaches the KV from here (pivot/engine/kv_transport.py);
- released: the destination's KV cache is released (it is shifting down);
- bad_length: the handle holds no tokens, or not fewer than the sequence has (a bug upstream)."""


@dataclass
class KVHandle:
    """Where a migrated sequence's exported KV waits, and what it is valid for
    (pivot/engine/kv_export.py)."""

    path: str
    """Base path; TP rank r's slice is `{path}_r{r}`."""
    num_tokens: int
    """Tokens whose K/V (and recurrent state) the files hold: the sequence's first ones."""
    tp_size: int
    layout: str
    """`kv_layout` of the engine that wrote it (layers, heads per rank, head dim, dtype)."""
    weights_version: int
    """K/V computed with other weights are stale: a destination on another version re-prefills."""
    host: int = 0
    """Host id of the source (`ClusterSpec.host`): the files are in that host's /dev/shm."""
    nixl_key: str = ""
    """Store key prefix under which the source serves each rank's file over NIXL ("": not
    served, so reachable from its own host only)."""
    cuda_ipc: bool = False
    """The source also keeps device copies a same-host CUDA destination can open by IPC."""


@dataclass
class Request:
    """A sequence to generate; non-empty `output_ids` resumes an aborted one (re-prefill)."""

    id: int
    prompt_ids: list[int]
    params: SamplingParams = field(default_factory=SamplingParams)
    output_ids: list[int] = field(default_factory=list)
    output_logprobs: list[float] = field(default_factory=list)
    kv: KVHandle | None = None
    """The partial's exported KV (set by an abort with KV migration on); None: re-prefill."""
    versions: VersionRanges = field(default_factory=VersionRanges)
    """Which version made each token of `output_ids` (a partial's); empty for a new request."""


@dataclass
class Output:
    id: int
    prompt_ids: list[int]
    output_ids: list[int]
    output_logprobs: list[float]
    finish_reason: str
    """`stop` (EOS or stop string) or `length` (max_new_tokens or the engine's max length)."""
    weights_version: int
    """`versions.oldest(...)`: the one the staleness bound is checked against."""
    versions: VersionRanges = field(default_factory=VersionRanges)
    """Which version made each output token (a resumed partial's earlier ones included)."""


class AbortResult(list):
    """What `abort(ids)` returns: a list of partial Requests (re-add them anywhere to resume),
    plus `unknown_ids`, the ids that were not in the engine (ignored)."""

    def __init__(self, partials: list[Request], unknown_ids: list[int]) -> None:
        super().__init__(partials)
        self.unknown_ids = list(unknown_ids)

    @property
    def partials(self) -> list[Request]:
        return list(self)


@dataclass
class EngineStats:
    n_seq: int
    """Unfinished sequences held by the engine (running and locally waiting)."""
    n_tok: int
    """Sum of their lengths (prompt + generated)."""
    kv_free_tokens: int
    kv_total_tokens: int
    tokens_generated: int
    """Tokens sampled by this engine since it was built."""
    last_step_latency_s: float
    weights_version: int
    n_running: int = 0
    """Of the unfinished sequences, those in the running batch: the ones a decode step advances (the
    embedded engine's; 0 where the engine does not say)."""
    running_tokens: int = 0
    """The running sequences' lengths, summed."""
    prefill_tokens: int = 0
    """Prompt (and resumed-output) tokens computed since the engine was built."""
    reprefill_tokens: int = 0
    """Of those, tokens computed again: sequences resumed without their KV, or preempted."""
    prefix_hit_tokens: int = 0
    """Prompt tokens whose cached K/V were reused instead of computed."""
    graphs_captured: int = 0
    """Decode graphs captured since the engine was built (each shift up captures the buckets
    its batches reach again: a release frees the storage they read)."""
    graphs_capture_s: float = 0.0
    """Seconds those captures took."""
    kv_imported: int = 0
    """Migrated sequences that arrived with their KV (nothing re-prefilled)."""
    kv_imported_tokens: int = 0
    kv_fallbacks: int = 0
    """Migrated sequences whose KV handle this engine could not use: re-prefilled."""
    kv_fallback_tokens: int = 0
    # the fallbacks by reason (pivot/engine/kv_export.py REFUSALS); they sum to kv_fallbacks
    kv_refused_stale: int = 0
    """K/V computed with other weights (the exact choice is to recompute them)."""
    kv_refused_no_room: int = 0
    kv_refused_other_tp: int = 0
    kv_refused_other_layout: int = 0
    kv_refused_unreachable: int = 0
    kv_refused_released: int = 0
    kv_refused_bad_length: int = 0


class SeqStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass
class Sequence:
    """Mutable engine-side state of one request."""

    id: int
    token_ids: list[int]
    """Prompt followed by generated tokens."""
    prompt_len: int
    params: SamplingParams
    logprobs: list[float]
    arrival: int
    """Admission order; the scheduler preempts the newest first."""
    num_computed: int = 0
    """Tokens whose K/V are in the cache."""
    prefill_end: int = 0
    """Length when last placed in the cache: tokens before it are prefill, after it decode."""
    status: SeqStatus = SeqStatus.WAITING
    finish_reason: str | None = None
    recompute: bool = False
    """Its prefill recomputes K/V computed before (resumed without its KV, or preempted)."""
    versions: VersionRanges = field(default_factory=VersionRanges)
    """Which version made each generated token, as `Output.versions`."""

    def made_token(self, version: int) -> None:
        """Record that the token about to be appended was made by weights `version`."""
        self.versions = self.versions.made(version, self.num_generated)

    @property
    def num_generated(self) -> int:
        return len(self.token_ids) - self.prompt_len

    @property
    def num_uncomputed(self) -> int:
        return len(self.token_ids) - self.num_computed

    def to_request(self, kv: KVHandle | None = None) -> Request:
        return Request(
            id=self.id,
            prompt_ids=self.token_ids[: self.prompt_len],
            params=self.params,
            output_ids=self.token_ids[self.prompt_len :],
            output_logprobs=list(self.logprobs),
            kv=kv,
            versions=self.versions,
        )
