"""The run log continuing a killed run from checkpoint K (pivot/runtime/records/metrics.py): the
rows of steps 1..K stay, the rows the killed run trained after K go (they are trained again), and
the eval at K goes (the resumed run evaluates its start again)."""

from __future__ import annotations

import json
from pathlib import Path

from pivot.runtime.records.metrics import RunLog


def _steps(run: Path, name: str) -> list[int]:
    return [json.loads(line)["step"] for line in (run / name).read_text().splitlines()]


def test_a_resume_from_checkpoint_k_keeps_the_steps_it_holds(tmp_path: Path) -> None:
    killed = {"metrics.jsonl": [1, 2, 3, 4, 5], "samples.jsonl": [1, 1, 2, 3, 4, 5],
              "eval.jsonl": [0, 2, 4]}  # fmt: skip
    for name, steps in killed.items():
        (tmp_path / name).write_text("".join(json.dumps({"step": s}) + "\n" for s in steps))
    RunLog(tmp_path, tensorboard=False, resume_step=3)
    assert _steps(tmp_path, "metrics.jsonl") == [1, 2, 3]
    assert _steps(tmp_path, "samples.jsonl") == [1, 1, 2, 3]
    assert _steps(tmp_path, "eval.jsonl") == [0, 2]


def test_a_new_run_into_the_folder_starts_its_records_empty(tmp_path: Path) -> None:
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n')
    RunLog(tmp_path, tensorboard=False)
    assert (tmp_path / "metrics.jsonl").read_text() == ""
