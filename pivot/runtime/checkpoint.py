"""Checkpoints every K steps and resume.

A checkpoint of step K is a folder `step_00000K/` holding the trainer's shards and optimizer
(one file per training rank), the policy exported in HF layout (`policy/`), and
`controller.json`: the sample buffer, the data cursor and the flow counters as they were when
step K finished training. `latest` names the newest complete one and is written last, so a
job killed mid-checkpoint resumes from the previous one. On resume, steps <= K are closed
(never trained again) and every open sample of later steps is regenerated or re-judged from
the buffer's state (none lost).
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pivot.config import PivotConfig


class Checkpointer:
    def __init__(self, cfg: PivotConfig) -> None:
        self.every = cfg.checkpoint.every
        self.dir = Path(cfg.checkpoint.dir or Path(cfg.log.dir) / "checkpoints")
        self._pending: dict[int, dict[str, Any]] = {}

    def due(self, step: int, total: int) -> bool:
        return (self.every > 0 and step % self.every == 0) or step == total

    def path(self, step: int) -> Path:
        return self.dir / f"step_{step:06d}"

    def snapshot(self, step: int, state: dict[str, Any]) -> None:
        """Controller state at the moment step `step` finished; written once the trainer saved."""
        self._pending[step] = state

    def commit(self, step: int) -> Path:
        path = self.path(step)
        path.mkdir(parents=True, exist_ok=True)
        (path / "controller.json").write_text(json.dumps(self._pending.pop(step)))
        tmp = self.dir / "latest.tmp"
        tmp.write_text(path.name)
        os.replace(tmp, self.dir / "latest")  # atomic: a half-written checkpoint is never "latest"
        return path

    def latest(self) -> Path | None:
        marker = self.dir / "latest"
        if not marker.is_file():
            return None
        return self.dir / marker.read_text().strip()

    def load(self) -> tuple[Path, dict[str, Any]]:
        path = self.latest()
        if path is None:
            raise FileNotFoundError(f"--checkpoint.resume: no checkpoint in {self.dir} (no 'latest' file)")
        state_file = path / "controller.json"
        if not state_file.is_file():
            raise FileNotFoundError(f"checkpoint {path}: missing controller.json")
        return path, json.loads(state_file.read_text())
