"""Checkpoints every K steps, and which one a job resumes from.

A checkpoint of step K is a folder `step_00000K/` holding the trainer's shards and optimizer
(one file per training rank), the policy exported in HF layout (`policy/`), `controller.json`
(the sample buffer, the data cursor and the flow counters as they were when step K finished
training) and, written last, `manifest.json` (pivot.runtime.manifest): a folder without a valid
manifest is incomplete or damaged and is never resumed from. Resuming takes the newest complete
checkpoint, reporting each newer broken one in one line. On resume, steps <= K are closed (never
trained again) and every open sample of later steps is regenerated or re-judged from the
buffer's state (none lost).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pivot.config import PivotConfig
from pivot.runtime.manifest import MANIFEST, FileDigest, discard, seal, write_manifest

STATE_FILE = "controller.json"
PREFIX = "step_"


class Checkpointer:
    def __init__(self, cfg: PivotConfig) -> None:
        self.every = cfg.checkpoint.every
        self.dir = Path(cfg.checkpoint.dir or Path(cfg.log.dir) / "checkpoints")
        self._pending: dict[int, dict[str, Any]] = {}

    def due(self, step: int, total: int) -> bool:
        return (self.every > 0 and step % self.every == 0) or step == total

    def path(self, step: int) -> Path:
        return self.dir / f"{PREFIX}{step:06d}"

    def snapshot(self, step: int, state: dict[str, Any]) -> Path:
        """Controller state at the moment step `step` finished, written once the trainer saved;
        the folder it goes to loses any stale manifest before the trainer writes into it."""
        self._pending[step] = state
        path = self.path(step)
        discard(path)
        return path

    def commit(self, step: int, files: list[FileDigest]) -> Path:
        """`files`: what the training ranks wrote and fsynced; the manifest goes last."""
        path = self.path(step)
        path.mkdir(parents=True, exist_ok=True)
        (path / STATE_FILE).write_text(json.dumps(self._pending.pop(step)))
        write_manifest(path, [*files, *seal([path / STATE_FILE], path)])
        return path

    def folders(self) -> list[Path]:
        """Every step folder, newest first, complete or not."""
        if not self.dir.is_dir():
            return []
        steps = [
            p
            for p in self.dir.iterdir()
            if p.is_dir() and p.name.startswith(PREFIX) and p.name[len(PREFIX) :].isdigit()
        ]
        return sorted(steps, key=lambda p: int(p.name[len(PREFIX) :]), reverse=True)

    def newest(self) -> Path | None:
        """The newest folder with a manifest (not read back: for messages, not for resuming)."""
        return next((p for p in self.folders() if (p / MANIFEST).is_file()), None)

    @staticmethod
    def first_complete(
        folders: list[Path], problem: Callable[[Path], str | None], report: Callable[[str], None]
    ) -> Path | None:
        """The first of `folders` (newest first) `problem` finds nothing wrong with; each one
        before it is reported."""
        for path in folders:
            why = problem(path)
            if why is None:
                return path
            report(f"pivot: checkpoint {path} skipped: {why}")
        return None

    def set_aside(self) -> Path | None:
        """A fresh start in a folder holding another run's checkpoints moves them to
        `<dir>.old-N` first, so a later `auto` restart cannot resume the other run."""
        if not self.folders():
            return None
        n = 1
        while Path(f"{self.dir}.old-{n}").exists():
            n += 1
        target = Path(f"{self.dir}.old-{n}")
        os.replace(self.dir, target)
        return target

    def load(self, path: Path) -> dict[str, Any]:
        return json.loads((path / STATE_FILE).read_text())
