"""Rank 0's stop messages reach the pipe torchrun's agent and every rank share in one write: with
print the line's newline was a second write, and another process's output landed before it (a
suite run saw torchrun's warning glued to the resume hint)."""

from __future__ import annotations

import io
import sys

import pytest

from pivot.runtime.job.launch import tell


class Writes(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def write(self, s: str) -> int:
        self.calls.append(s)
        return super().write(s)


def test_a_message_and_its_newline_are_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    err = Writes()
    monkeypatch.setattr(sys, "stderr", err)
    tell("\npivot: interrupted.\npivot: the newest checkpoint is X; relaunch ...")
    assert err.calls == ["\npivot: interrupted.\npivot: the newest checkpoint is X; relaunch ...\n"]
    err.calls.clear()
    print("a\nb", file=sys.stderr)  # what it replaced: the newline came as a write of its own
    assert err.calls == ["a\nb", "\n"]
