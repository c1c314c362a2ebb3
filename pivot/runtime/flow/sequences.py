"""The RL flow's records: a sequence it has in flight (`SeqInfo`), a sample's whole response as
the buffer records it (`Response`), and what a device backend may change in the flow's
sequences (`SequenceShaper`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from pivot.engine import Request
from pivot.rl.buffer import Key
from pivot.sched.records import SeqState


@dataclass
class SeqInfo:
    seq_id: int
    role: str  # rollout | reward
    key: Key
    request: Request  # the latest known state: prompt plus the tokens generated so far
    version: int = -1  # rollout: oldest policy version that generated its tokens
    r_verifiable: float = 0.0  # reward sequences carry the verifiable part along
    eval_step: int = -1  # >= 0: a held-out evaluation sequence of that step (never trained on)
    attempt: int = 0  # a judging: 1 for the retry of an unparsable verdict

    def state(self) -> SeqState:
        return SeqState(self.seq_id, len(self.request.prompt_ids), len(self.request.output_ids))

    def oldest(self, version: int) -> int:
        """The older of `version` and the oldest one its earlier attempts (partials) were made by."""
        return version if self.version < 0 else min(self.version, version)


class SequenceShaper(Protocol):
    """What a device backend may change in the flow's sequences (the emulated devices' drawn
    lengths, pivot/emulate/flow.py): held by the flow, not a subclass of it."""

    def params(self, role: str, key: Key, params: dict) -> dict:
        """The sampling parameters of a new `role` sequence for sample `key`."""
        ...

    def judged(self, key: Key, response: str, response_ids: list[int] | None) -> str:
        """The response text a judge of sample `key` reads (`response_ids`: its tokens)."""
        ...


@dataclass(frozen=True, kw_only=True)
class Response:
    """A sample's whole response as the buffer records it: one rollout's output, or an episode's
    turns with the tools' responses between them (`mask` 0 on those)."""

    ids: list[int]
    logprobs: list[float]
    version: int
    prompt_ids: list[int]
    version_starts: list[tuple[int, int]]
    mask: list[int] | None = None
    turns: int = 1
    tool_calls: int = 0
    tool_errors: int = 0
    tool_reward: float = 0.0
    judged_text: str | None = None
    """What the judge reads instead of the whole text (tools.judge_sees=answer)."""
