"""Each run writes into its own folder (pivot/runtime/records/run_folder.py) and `--checkpoint.keep`
prunes old checkpoints: the folder rules on a fake `runs/` tree, then two real tiny jobs
started from the same folder without --log.dir."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
import torch.distributed as dist

from pivot.config import PivotConfig
from pivot.runtime.records.checkpoint import Checkpointer
from pivot.runtime.records.latest import latest_run, point_latest
from pivot.runtime.records.manifest import MANIFEST, write_manifest
from pivot.runtime.records.run_folder import (
    RECORD,
    launch_id,
    make,
    mark_started,
    record_launch,
    resolve,
)
from tests.conftest import torchrun_main
from tests.runtime.models import random_models
from tests.runtime.test_runtime import SMALL, rows

T0 = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def at(minutes: int) -> datetime:
    return T0.replace(minute=T0.minute + minutes)


def start(root: Path, resume: str, launch: str, when: datetime = T0, log_dir: str = "") -> Path:
    """What rank 0 does at a start-up that succeeds: choose the folder, make it, and (started)
    point runs/latest at it."""
    chosen = resolve(log_dir, "", resume, launch, "tiny-cpu", when, root)
    folder = make(chosen, "", launch, "tiny-cpu", when, ["main.py"], root)[0]
    mark_started(folder, chosen.given, root)
    return folder


def checkpoint(folder: Path, step: int, complete: bool = True) -> Path:
    path = folder / f"step_{step:06d}"
    path.mkdir(parents=True)
    (path / "controller.json").write_text("{}")
    if complete:
        write_manifest(path, [])
    return path


def tree(root: Path) -> dict[str, bytes | str]:
    """Every file and link under `root` with its content: what 'untouched' compares."""
    out: dict[str, bytes | str] = {}
    for p in sorted(root.rglob("*")):
        if p.is_symlink():
            out[str(p.relative_to(root))] = os.readlink(p)
        elif p.is_file():
            out[str(p.relative_to(root))] = p.read_bytes()
    return out


def test_a_new_folder_per_run_named_by_time_and_preset(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    first = start(root, "no", "L1")
    second = start(root, "no", "L2")  # the same second: a suffix
    assert (first.name, second.name) == ("20260102-030405-tiny-cpu", "20260102-030405-tiny-cpu-2")
    record = json.loads((first / RECORD).read_text())
    assert record["preset"] == "tiny-cpu" and record["launches"] == [
        {"id": "L1", "started": "2026-01-02T03:04:05+00:00", "argv": ["main.py"]}
    ]
    assert record["checkpoints"] == ""  # its own checkpoints/
    assert os.readlink(root / "latest") == second.name and latest_run(root) == second


def test_auto_continues_this_launchs_folder_else_a_new_one(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    mine = start(root, "auto", "L1")
    other = start(root, "auto", "L2", at(1))
    assert other != mine
    again = resolve("", "", "auto", "L1", "tiny-cpu", at(2), root)  # a torchrun restart of L1
    assert (again.path, again.new) == (mine, False) and "this job's" in again.note
    assert start(root, "auto", "L1", at(2)) == mine and latest_run(root) == mine
    assert start(root, "no", "L1", at(3)) not in (mine, other)  # no: always a new one


def test_yes_continues_the_run_latest_names(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    start(root, "no", "L1")
    checkpoint(root / "20260102-030405-tiny-cpu" / "checkpoints", 2)  # an older run's
    mine = start(root, "no", "L2", at(1))
    checkpoint(mine / "checkpoints", 4)
    chosen = resolve("", "", "yes", "L3", "tiny-cpu", at(2), root)
    assert (chosen.path, chosen.new) == (mine, False)
    assert chosen.note == (
        f"pivot: --checkpoint.resume: continuing {mine}, the run {root / 'latest'} names (step 4)"
    )
    before = tree(mine)
    assert make(chosen, "", "L3", "tiny-cpu", at(2), ["main.py"], root)[0] == mine
    assert tree(mine) == before  # the launch is recorded once its start succeeded
    record_launch(mine, "L3", at(2), ["main.py"])
    record_launch(mine, "L3", at(3), ["main.py"])  # a restart of L3: already there
    launches = json.loads((mine / RECORD).read_text())["launches"]
    assert [launch["id"] for launch in launches] == ["L2", "L3"]
    assert resolve("", "", "auto", "L3", "tiny-cpu", at(5), root).path == mine


def test_yes_after_a_run_stopped_before_its_first_checkpoint_never_names_another(
    tmp_path: Path,
) -> None:
    """A Ctrl-C before the first checkpoint, then `--checkpoint.resume`: it used to continue the
    newest older run with a checkpoint (another run, on other data). Now it says this one has
    none and how to start it again, and changes nothing."""
    root = tmp_path / "runs"
    older = start(root, "no", "L1")
    checkpoint(older / "checkpoints", 4)
    stopped = start(root, "no", "L2", at(1))  # no checkpoint: Ctrl-C'd early
    before = tree(tmp_path)
    with pytest.raises(ValueError) as e:
        resolve("", "", "yes", "L3", "tiny-cpu", at(2), root)
    assert str(e.value) == (
        f"--checkpoint.resume yes: {root / 'latest'} is {stopped}, which has no complete "
        f"checkpoint (it stopped before its first): start it again with --log.dir {stopped}, "
        "or continue another run with --log.dir FOLDER --checkpoint.resume"
    )
    assert str(older) not in str(e.value) and tree(tmp_path) == before


def test_yes_without_any_run_stops_naming_where_it_looked(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    before = tree(tmp_path)
    with pytest.raises(ValueError) as e:
        resolve("", "", "yes", "L2", "tiny-cpu", at(1), root)
    assert str(e.value) == (
        f"--checkpoint.resume yes: no run to continue ({root / 'latest'} names none; looked in 0 "
        "run folders): give the run's folder with --log.dir FOLDER --checkpoint.resume"
    )
    assert tree(tmp_path) == before


def test_latest_moves_only_once_a_run_started(tmp_path: Path) -> None:
    """A start that fails (after its folder was made) leaves runs/latest naming the run before."""
    root = tmp_path / "runs"
    first = start(root, "no", "L1")
    chosen = resolve("", "", "no", "L2", "tiny-cpu", at(1), root)
    failed = make(chosen, "", "L2", "tiny-cpu", at(1), ["main.py"], root)[0]
    assert failed != first and latest_run(root) == first
    mark_started(failed, chosen.given, root)
    assert latest_run(root) == failed


def test_a_given_folder_with_checkpoints_is_refused_a_fresh_start(tmp_path: Path) -> None:
    run = tmp_path / "mine"
    (run / "metrics.jsonl").parent.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 0}\n')
    checkpoint(run / "checkpoints", 2)
    checkpoint(run / "checkpoints", 3, complete=False)
    before = tree(tmp_path)
    with pytest.raises(ValueError) as e:
        resolve(str(run), "", "no", "L1", "tiny-cpu", T0, tmp_path / "runs")
    assert str(e.value) == (
        f"--log.dir {run} holds a run's checkpoints (newest step 2): continue it with "
        "--checkpoint.resume, or leave out --log.dir for a new folder"
    )
    assert tree(tmp_path) == before  # nothing moved, nothing deleted
    for resume in ("auto", "yes"):  # used as it is; `latest` never links to it
        assert start(tmp_path / "runs", resume, "L1", log_dir=str(run)) == run
    assert tree(tmp_path) == before
    with pytest.raises(ValueError, match="--checkpoint.dir .* holds a run's checkpoints"):
        resolve("", str(run / "checkpoints"), "no", "L1", "tiny-cpu", T0, tmp_path / "runs")


def test_yes_with_a_checkpoint_dir_continues_the_run_folder_that_wrote_it(tmp_path: Path) -> None:
    root, shared = tmp_path / "runs", tmp_path / "ckpt"
    chosen = resolve("", str(shared), "no", "L1", "tiny-cpu", T0, root)
    wrote = make(chosen, str(shared), "L1", "tiny-cpu", T0, ["main.py"], root)[0]
    start(root, "no", "L2", at(1))  # newer, its checkpoints elsewhere
    with pytest.raises(ValueError, match=f"no complete checkpoint in {shared}$"):
        resolve("", str(shared), "yes", "L3", "tiny-cpu", at(2), root)
    checkpoint(shared, 2)
    assert resolve("", str(shared), "yes", "L3", "tiny-cpu", at(2), root).path == wrote


def test_latest_is_replaced_but_an_earlier_pivots_folder_is_kept(tmp_path: Path) -> None:
    root = tmp_path / "runs"
    a, b = root / "a", root / "b"
    a.mkdir(parents=True)
    b.mkdir()
    assert point_latest(root, a) is None and point_latest(root, b) is None
    assert os.readlink(root / "latest") == "b" and sorted(os.listdir(root)) == ["a", "b", "latest"]
    (root / "latest").unlink()
    (root / "latest").mkdir()  # runs/latest of an earlier Pivot: a real folder
    why = point_latest(root, a)
    assert why is not None and "left as it is" in why and (root / "latest").is_dir()
    checkpoint(root / "latest" / "checkpoints", 8)
    with pytest.raises(ValueError, match="--log.dir .*latest --checkpoint.resume$"):
        resolve("", "", "yes", "L1", "tiny-cpu", T0, root)


def test_launch_id_is_torchruns_run_id_else_one_kept_in_the_store(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = dist.HashStore()
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "12345")
    assert launch_id(dist.PrefixStore("pivot-attempt-0", store)) == "12345"
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")  # torchrun's default --rdzv-id
    first = launch_id(dist.PrefixStore("pivot-attempt-0", store))
    assert launch_id(dist.PrefixStore("pivot-attempt-1", store)) == first != "none"
    assert launch_id(dist.HashStore()) != first


def test_keep_prunes_older_checkpoints_once_a_newer_one_is_complete(tmp_path: Path) -> None:
    cfg = PivotConfig()
    cfg.checkpoint.dir, cfg.checkpoint.keep = str(tmp_path / "ckpt"), 2
    ckpt = Checkpointer(cfg.checkpoint, tmp_path)
    for step in (1, 2, 4):
        checkpoint(ckpt.dir, step)
    checkpoint(ckpt.dir, 3, complete=False)  # killed while written
    checkpoint(ckpt.dir, 9)  # a dead attempt's, beyond where this run is
    ckpt.snapshot(5, {"step": 5})
    ckpt.commit(5, [])
    assert [p.name for p in ckpt.folders()] == ["step_000009", "step_000005", "step_000004"]
    assert (ckpt.path(5) / MANIFEST).is_file()
    cfg.checkpoint.keep = 0  # keep all
    ckpt = Checkpointer(cfg.checkpoint, tmp_path)
    ckpt.snapshot(6, {"step": 6})
    ckpt.commit(6, [])
    assert len(ckpt.folders()) == 4


@pytest.mark.slow  # two torchrun jobs of 2 ranks: 13-18 s
def test_two_runs_without_log_dir_leave_each_other_alone(tmp_path: Path) -> None:
    """The tiny job twice from one folder, the second relaunching the first's config.json with
    --config (and one flag over it): the second gets a new run folder and the first's config
    but that flag, runs/latest links to it, and the first's records and checkpoints are byte for
    byte what it left."""
    models = random_models(tmp_path / "models")
    cmd = torchrun_main(
        2,
        "--model.policy",
        str(models[0]),
        "--model.genrm",
        str(models[1]),
        *SMALL,
        "--train.steps",
        "1",
        "--train.devices",
        "1",
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    work = tmp_path / "work"
    work.mkdir()
    out = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=240, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    first = latest_run(work / "runs")
    before = tree(first)
    again = torchrun_main(2, "--config", str(first / "config.json"), "--train.steps", "2")
    out = subprocess.run(again, cwd=work, capture_output=True, text=True, timeout=240, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    second = latest_run(work / "runs")
    assert second != first and sorted(p.name for p in (work / "runs").iterdir()) == sorted(
        ["latest", first.name, second.name]
    )
    assert tree(first) == before and len(rows(first, "metrics.jsonl")) == 1
    assert [r["step"] for r in rows(first, "eval.jsonl")] == [0, 1]
    assert (first / "checkpoints" / "step_000001" / MANIFEST).is_file()
    assert len(rows(second, "metrics.jsonl")) == 2
    configs = [json.loads((f / "config.json").read_text()) for f in (first, second)]
    for c in configs:
        c["log"]["dir"], c["train"]["steps"] = "", 0
    assert configs[0] == configs[1]  # the first's config, but the flag given over it
