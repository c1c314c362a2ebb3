"""Which folder a run writes into: its own, so a run never overwrites another's records or
checkpoints.

Without `--log.dir` each run gets a new folder `runs/<UTC start YYYYmmdd-HHMMSS>-<preset>` and
`runs/latest` links to the newest (pivot/runtime/records/latest.py). `run.json` in it records the
launches that wrote it (torchrun's run id, start time, argv): a torchrun restart of the same
launch finds its folder again by that id. By `--checkpoint.resume`:

- `auto`: this launch's folder (a restart continues it), else a new one;
- `yes`: this launch's folder, else the run `runs/latest` names, which must hold a complete
  checkpoint: where it holds none (it stopped before its first), the job stops with one line
  saying so and how to start it again, never continuing some older run;
- `no`: a new folder.

`runs/latest` moves to a run's folder once its start succeeded (`point_latest`, called by the
job), not when the folder is chosen: a start that fails leaves it naming the run it named.

A `--log.dir X` given is used as it is (`yes` and `auto` resume from its checkpoints); with `no`
a folder holding a run's checkpoints is refused, as is a `--checkpoint.dir` holding some.
Nothing here moves or deletes anything: a start that fails leaves every earlier run as it was.
Rank 0 decides (`resolve`, `make`) and the job hands its answer to every rank
(pivot/runtime/job/inputs.py), so the folder is the same on every rank and every host.
"""

from __future__ import annotations

import json
import os
import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from pivot.runtime.records.checkpoint import newest_complete, step_of
from pivot.runtime.records.latest import LATEST, RUNS, latest_run, point_latest

RECORD = "run.json"
STORE_KEY = "pivot/launch-id"


@dataclass(frozen=True)
class RunFolder:
    path: Path
    new: bool  # `make` creates it (under the first free name from `path` on)
    given: bool = False  # the --log.dir given: not one of runs/, `latest` never links to it
    note: str = ""  # one line for rank 0 to print, when the choice is worth saying


@dataclass(frozen=True)
class PastRun:
    """A run folder Pivot named, as its `run.json` describes it."""

    path: Path
    launches: tuple[str, ...]
    started: str  # ISO UTC of its first launch: orders run folders, newest first
    checkpoints: Path  # where it writes its checkpoints


def launch_id(store: Any) -> str:
    """This launch's id, the same across its torchrun restarts: TORCHELASTIC_RUN_ID, which
    torchrun sets to --rdzv-id (the sbatch template passes the Slurm job id); under --standalone
    torchrun draws a uuid once per invocation, before its agent starts (and restarts) the workers
    (torch 2.13 torch/distributed/run.py:991, `args.rdzv_id = str(uuid.uuid4())` in `run`).
    torchrun's default --rdzv-id is the same "none" for every job: then a uuid kept in the job's
    store (`store` outlives the restarts where torchrun's agent holds it), else one per process."""
    given = os.environ.get("TORCHELASTIC_RUN_ID", "")
    if given and given != "none":
        return given
    base = getattr(store, "underlying_store", store)  # not the attempt's prefix: restarts read it
    return base.compare_set(STORE_KEY, "", uuid.uuid4().hex).decode()


def past_runs(root: Path = RUNS) -> list[PastRun]:
    """The run folders under `root` Pivot named, newest first. A folder without a readable
    `run.json` is none (tools' output folders, a run of an earlier Pivot, `--log.dir` runs)."""
    if not root.is_dir():
        return []
    out = []
    for path in root.iterdir():
        if path.is_symlink() or not (path / RECORD).is_file():
            continue
        try:
            rec = json.loads((path / RECORD).read_text())
            launches = tuple(str(launch["id"]) for launch in rec["launches"])
            started = str(rec["launches"][0]["started"])
            # "": its own checkpoints/ (kept relative: `runs/` may move); else a --checkpoint.dir
            checkpoints = Path(rec["checkpoints"]) if rec["checkpoints"] else path / "checkpoints"
        except (ValueError, KeyError, IndexError, TypeError):
            continue  # damaged: never chosen, never changed
        out.append(PastRun(path, launches, started, checkpoints))
    return sorted(out, key=lambda r: (r.started, r.path.name), reverse=True)


def new_name(preset: str, now: datetime, root: Path = RUNS) -> Path:
    """`root/<YYYYmmdd-HHMMSS>-<preset>`, with `-2`, `-3`, ... where that exists."""
    base = f"{now.strftime('%Y%m%d-%H%M%S')}-{re.sub(r'[^A-Za-z0-9._+-]', '_', preset)}"
    path, n = root / base, 1
    while path.exists() or path.is_symlink():
        n += 1
        path = root / f"{base}-{n}"
    return path


def _refuse_checkpoints(checkpoints: Path, flag: str, given: str, instead: str) -> None:
    """Refuse a fresh start where a run's checkpoints are: a later `auto` restart would take
    them for this run's, and this run's would overwrite theirs step by step."""
    newest = newest_complete(checkpoints)
    if newest is not None:
        raise ValueError(
            f"{flag} {given} holds a run's checkpoints (newest step {step_of(newest)}): "
            f"continue it with --checkpoint.resume, or {instead}"
        )


def resolve(
    log_dir: str,
    checkpoint_dir: str,
    resume: str,
    launch: str,
    preset: str,
    now: datetime,
    root: Path = RUNS,
) -> RunFolder:
    """The run folder of a job started with `--log.dir log_dir` ("" = none given),
    `--checkpoint.dir checkpoint_dir` and `--checkpoint.resume resume`, by the rules above.
    Reads the file system, writes nothing; ValueError (one line) where the job must not start."""
    if resume == "no" and checkpoint_dir:
        _refuse_checkpoints(
            Path(checkpoint_dir), "--checkpoint.dir", checkpoint_dir, "give another"
        )
    if log_dir:
        if resume == "no" and not checkpoint_dir:
            where, instead = Path(log_dir) / "checkpoints", "leave out --log.dir for a new folder"
            _refuse_checkpoints(where, "--log.dir", log_dir, instead)
        return RunFolder(Path(log_dir), new=False, given=True)
    fresh = RunFolder(new_name(preset, now, root), new=True)
    if resume == "no":
        return fresh
    runs = past_runs(root)
    mine = next((r for r in runs if launch in r.launches), None)
    if mine is not None:
        note = f"pivot: run folder {mine.path} (this job's: continued)"
        return RunFolder(mine.path, new=False, note=note)
    if resume == "auto":
        return fresh
    if checkpoint_dir:  # the checkpoints are there: the run folder that wrote them, else a new one
        where = Path(checkpoint_dir)
        if newest_complete(where) is None:
            raise ValueError(f"--checkpoint.resume yes: no complete checkpoint in {where}")
        same = next((r for r in runs if r.checkpoints == where.resolve()), None)
        if same is None:
            return fresh
        note = f"pivot: --checkpoint.resume: continuing {same.path}, the run folder that wrote them"
        return RunFolder(same.path, new=False, note=note)
    latest = root / LATEST
    if not latest.is_symlink():
        hint = ""
        if latest.is_dir() and newest_complete(latest / "checkpoints"):
            hint = f"; {latest} is an earlier Pivot's run: --log.dir {latest} --checkpoint.resume"
        raise ValueError(
            f"--checkpoint.resume yes: no run to continue ({latest} names none; looked in "
            f"{len(runs)} run folder{'s' * (len(runs) != 1)}): give the run's folder with "
            f"--log.dir FOLDER --checkpoint.resume{hint}"
        )
    last = latest_run(root)
    newest = newest_complete(last / "checkpoints")
    run = next((r for r in runs if r.path.resolve() == last.resolve()), None)
    if run is not None:
        newest = newest_complete(run.checkpoints)
    if newest is None:
        raise ValueError(
            f"--checkpoint.resume yes: {latest} is {last}, which has no complete checkpoint (it "
            f"stopped before its first): start it again with --log.dir {last}, or continue "
            "another run with --log.dir FOLDER --checkpoint.resume"
        )
    note = (
        f"pivot: --checkpoint.resume: continuing {last}, the run {latest} names "
        f"(step {step_of(newest)})"
    )
    return RunFolder(last, new=False, note=note)


def _write_record(folder: Path, record: dict[str, Any]) -> None:
    tmp = folder / f".{RECORD}.tmp"  # renamed over: a reader never finds half a record
    tmp.write_text(json.dumps(record, indent=1))
    os.replace(tmp, folder / RECORD)


def _launch(launch: str, now: datetime, argv: list[str]) -> dict[str, Any]:
    return {"id": launch, "started": now.isoformat(timespec="seconds"), "argv": argv}


def make(
    folder: RunFolder,
    checkpoint_dir: str,
    launch: str,
    preset: str,
    now: datetime,
    argv: list[str],
    root: Path = RUNS,
) -> tuple[Path, str]:
    """Rank 0 makes a new run folder (the next free name where another job took this one in the
    meantime) with its `run.json`. Returns the folder and the lines to print; `runs/latest`
    moves once the start succeeded (`mark_started`)."""
    lines = [folder.note] if folder.note else []
    path = folder.path
    if folder.new:
        root.mkdir(parents=True, exist_ok=True)
        while True:
            try:
                path.mkdir()
                break
            except FileExistsError:
                path = new_name(preset, now, root)
        record = {
            "preset": preset,
            "checkpoints": str(Path(checkpoint_dir).resolve()) if checkpoint_dir else "",
            "launches": [_launch(launch, now, argv)],
        }
        _write_record(path, record)  # before anything else: a restart finds the folder by it
        lines.append(f"pivot: run folder {path}")
    return path, "\n".join(lines)


def mark_started(folder: Path, given: bool, root: Path = RUNS) -> str | None:
    """A run's start succeeded: `root/latest` names its folder from now on (a `--log.dir` given
    leaves it alone). Returns a line to print where it cannot (`point_latest`)."""
    return None if given else point_latest(root, folder)


def record_launch(folder: Path, launch: str, now: datetime, argv: list[str]) -> None:
    """Add this launch to a run folder it continues (`--checkpoint.resume yes` from another
    launch), once its start succeeded: a start that fails leaves the folder as it was, and a
    torchrun restart of this launch finds the folder by it. No-op where the launch is already
    recorded or the folder has no `run.json` (a `--log.dir` given)."""
    file = folder / RECORD
    if not file.is_file():
        return
    record = json.loads(file.read_text())
    if any(launch == entry["id"] for entry in record["launches"]):
        return
    record["launches"].append(_launch(launch, now, argv))
    _write_record(folder, record)
