"""Rank 0's progress: a live bar on a terminal, one line per step anywhere else (a Slurm log, a
pipe), where a bar would print nothing until the run ends."""

from __future__ import annotations

import pytest

from pivot.runtime.records.progress import StepProgress


def test_a_step_prints_its_line_when_stdout_is_not_a_terminal(
    capsys: pytest.CaptureFixture[str],
) -> None:
    progress = StepProgress(total=3, start=0, enabled=True)  # pytest's stdout is no terminal
    progress.update(
        1, {"reward/mean": 0.5, "reward/accuracy": 0.25}, {"rollout": 2, "reward": 1, "train": 1}
    )
    progress.close()
    assert capsys.readouterr().out == "step 1: reward 0.500 acc 0.250 | RO=2 RM=1 TR=1\n"


def test_no_bar_is_started_off_a_terminal() -> None:
    assert not hasattr(StepProgress(total=3, start=0, enabled=True), "bar")
