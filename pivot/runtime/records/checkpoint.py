"""Checkpoints every K steps, and which one a job resumes from.

A checkpoint of step K is a folder `step_00000K/` holding the trainer's shards and optimizer
(one file per training rank), the policy exported in HF layout (`policy/`), `controller.json`
(the sample buffer, the data cursor and the flow counters as they were when step K finished
training) and, written last, `manifest.json` (pivot.runtime.records.manifest): a folder without a valid
manifest is incomplete or damaged and is never resumed from. Resuming takes the newest complete
checkpoint, reporting each newer broken one in one line. On resume, steps <= K are closed (never
trained again) and every open sample of later steps is regenerated or re-judged from the
buffer's state (none lost). `--checkpoint.keep N` removes older checkpoints once a newer one is
complete (`prune`).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pivot.config import CheckpointConfig
from pivot.runtime.records.manifest import MANIFEST, FileDigest, discard, seal, write_manifest

STATE_FILE = "controller.json"
PREFIX = "step_"


@dataclass(frozen=True)
class StartPoint:
    """Where a run starts: step 0 of a fresh run, or just after the checkpoint it resumes from."""

    checkpoint: Path | None = None
    """The step folder resumed from; None = a fresh start."""
    state: dict[str, Any] = field(default_factory=dict)
    """Its `controller.json` (step, weight version, buffer, data cursor); empty when fresh."""

    @property
    def step(self) -> int:
        """The last step already trained (0 when fresh)."""
        return self.state["step"] if self.checkpoint is not None else 0


class Checkpointer:
    def __init__(self, section: CheckpointConfig, run_dir: Path, launch: str = "") -> None:
        """`run_dir`: the run's folder (pivot/runtime/records/run_folder.py), where checkpoints go
        unless `section.dir` names a folder of their own; `launch`: the launch id its manifests
        carry (rank 0's; pivot/runtime/records/manifest.py)."""
        self.every, self.keep, self.launch = section.every, section.keep, launch
        self.run_dir = run_dir
        self.dir = Path(section.dir) if section.dir else run_dir / "checkpoints"
        self._pending: dict[int, dict[str, Any]] = {}

    def due(self, step: int, total: int) -> bool:
        return (self.every > 0 and step % self.every == 0) or step == total

    def path(self, step: int) -> Path:
        return self.dir / f"{PREFIX}{step:06d}"

    def snapshot(self, step: int, state: dict[str, Any]) -> Path:
        """Controller state at the moment step `step` finished, written once the trainer saved.
        A folder already there is a dead attempt's (a resume starts after the newest complete
        one): it goes, its manifest first, so that none of its files (a half-written shard, a
        shard of another world size, a policy of another shard count) outlives this save."""
        self._pending[step] = state
        path = self.path(step)
        discard(path)
        shutil.rmtree(path, ignore_errors=True)
        return path

    def commit(self, step: int, files: list[FileDigest]) -> Path:
        """`files`: what the training ranks wrote and fsynced; the manifest goes last."""
        path = self.path(step)
        path.mkdir(parents=True, exist_ok=True)
        (path / STATE_FILE).write_text(json.dumps(self._pending.pop(step)))
        write_manifest(path, [*files, *seal([path / STATE_FILE], path)], self.launch)
        self.prune(step)
        return path

    def prune(self, step: int) -> list[Path]:
        """`--checkpoint.keep N` once step `step` is complete: of the folders up to `step`, the
        complete ones beyond the newest N and the incomplete ones go (the ones removed). Newer
        folders stay: a dead attempt's, which this run writes again when it gets there (one
        with a stale manifest must not count among the N and cost the one just written)."""
        if self.keep <= 0:
            return []
        older = [p for p in self.folders() if step_of(p) <= step]
        complete = [p for p in older if (p / MANIFEST).is_file()]
        gone = complete[self.keep :] + [p for p in older if p not in complete and step_of(p) < step]
        for path in gone:
            discard(path)  # a crash halfway through the removal leaves an incomplete folder
            shutil.rmtree(path)
        return gone

    def folders(self) -> list[Path]:
        """Every step folder, newest first, complete or not."""
        return step_folders(self.dir)

    def newest(self) -> Path | None:
        """The newest folder with a manifest (not read back: for messages, not for resuming)."""
        return newest_complete(self.dir)

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

    def load(self, path: Path) -> dict[str, Any]:
        return json.loads((path / STATE_FILE).read_text())


def step_of(path: Path) -> int:
    return int(path.name[len(PREFIX) :])


def step_folders(folder: Path) -> list[Path]:
    """Every step folder in `folder`, newest first, complete or not."""
    if not folder.is_dir():
        return []
    steps = [
        p
        for p in folder.iterdir()
        if p.is_dir() and p.name.startswith(PREFIX) and p.name[len(PREFIX) :].isdigit()
    ]
    return sorted(steps, key=step_of, reverse=True)


def newest_complete(folder: Path) -> Path | None:
    """The newest step folder with a manifest (not read back: for choices and messages; a
    resume reads it back, pivot/runtime/job/inputs.py's `resume_point`)."""
    return next((p for p in step_folders(folder) if (p / MANIFEST).is_file()), None)


def unwritable(path: str | Path, error: OSError) -> str:
    """One line for a checkpoint the disk refused (full, read-only, a lost mount): what, where,
    how much room is left there, and what the user can change."""
    folder = Path(path)
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        room = f"{shutil.disk_usage(folder).free / 1e9:.1f} GB free on its file system"
    except OSError:
        room = "its file system cannot be read"
    return (
        f"cannot write checkpoint {path}: {error.strerror or error} ({room}); free space there, "
        "point --checkpoint.dir at another disk or keep fewer with --checkpoint.keep N"
    )
