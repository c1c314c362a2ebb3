"""Checkpoint completeness: a damaged newest checkpoint (truncated file, flipped byte, missing
manifest) is reported in one line and the previous complete one is resumed; `auto` without any
checkpoint starts fresh, `yes` fails. One rank, in process (gloo, world 1)."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch.distributed as dist

from pivot.config import PivotConfig
from pivot.dist import ClusterSpec
from pivot.runtime.job.inputs import resume_point
from pivot.runtime.records.checkpoint import Checkpointer
from pivot.runtime.records.manifest import MANIFEST, problem, seal

SPEC = ClusterSpec(world_size=1, rank=0, local_world_size=1)


@pytest.fixture
def one_rank() -> Iterator[None]:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def config(tmp: Path, resume: str) -> PivotConfig:
    cfg = PivotConfig()
    cfg.checkpoint.dir, cfg.checkpoint.resume = str(tmp / "ckpt"), resume
    return cfg


def write_checkpoint(ckpt: Checkpointer, step: int) -> Path:
    """What the job writes: the training ranks' files (sealed by the workers), then commit."""
    path = ckpt.snapshot(step, {"step": step, "version": step})
    (path / "policy").mkdir(parents=True)
    files = []
    for name, size in (
        ("rank00000-of-00002.safetensors", 3000),
        ("rank00001-of-00002.safetensors", 3000),
        ("policy/model.safetensors", 5000),
    ):
        (path / name).write_bytes(bytes((step * 7 + i) % 251 for i in range(size)))
        files.append(path / name)
    ckpt.commit(step, seal(files, path))
    return path


def truncate(path: Path) -> str:
    f = path / "policy" / "model.safetensors"
    f.write_bytes(f.read_bytes()[:1000])
    return (
        "policy/model.safetensors: 1000 bytes, manifest.json says 5000 (truncated or overwritten)"
    )


def flip(path: Path) -> str:
    f = path / "rank00001-of-00002.safetensors"
    data = bytearray(f.read_bytes())
    data[1234] ^= 0x10
    f.write_bytes(bytes(data))
    return "rank00001-of-00002.safetensors: sha256 differs from manifest.json (corrupt)"


def no_manifest(path: Path) -> str:
    (path / MANIFEST).unlink()
    return "no manifest.json (the job stopped before the checkpoint was complete)"


def test_manifest_lists_every_file_with_its_sha256(tmp_path: Path) -> None:
    path = write_checkpoint(Checkpointer(config(tmp_path, "no").checkpoint, tmp_path), 2)
    entries = {e["path"]: e for e in json.loads((path / MANIFEST).read_text())["files"]}
    on_disk = sorted(
        str(f.relative_to(path)) for f in path.rglob("*") if f.is_file() and f.name != MANIFEST
    )
    assert (
        sorted(entries)
        == on_disk
        == [
            "controller.json",
            "policy/model.safetensors",
            "rank00000-of-00002.safetensors",
            "rank00001-of-00002.safetensors",
        ]
    )
    for name, e in entries.items():
        data = (path / name).read_bytes()
        assert (e["size"], e["sha256"]) == (len(data), hashlib.sha256(data).hexdigest())
    assert problem(path) is None


@pytest.mark.parametrize("damage", [truncate, flip, no_manifest])
def test_damaged_newest_falls_back_to_previous(
    tmp_path: Path,
    one_rank: None,
    damage: Callable[[Path], str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    ckpt = Checkpointer(config(tmp_path, "auto").checkpoint, tmp_path)
    write_checkpoint(ckpt, 2)
    newest = write_checkpoint(ckpt, 4)
    why = damage(newest)
    path, state = resume_point(config(tmp_path, "auto"), ckpt, SPEC)
    assert path == ckpt.path(2) and state == {"step": 2, "version": 2}
    assert capsys.readouterr().out.splitlines() == [f"pivot: checkpoint {newest} skipped: {why}"]


def test_shares_split_the_files_and_each_finds_its_own_damage(tmp_path: Path) -> None:
    path = write_checkpoint(Checkpointer(config(tmp_path, "no").checkpoint, tmp_path), 2)
    flip(path)
    found = [problem(path, (k, 3)) for k in range(3)]
    assert sum(p is not None for p in found) == 1 and "rank00001" in next(p for p in found if p)


def test_rewriting_a_step_first_removes_its_manifest(tmp_path: Path) -> None:
    ckpt = Checkpointer(config(tmp_path, "no").checkpoint, tmp_path)
    path = write_checkpoint(ckpt, 2)
    ckpt.snapshot(2, {"step": 2})  # a new run reaches step 2 again; killed before it commits
    assert problem(path) is not None and ckpt.newest() is None


def test_a_dead_attempts_files_do_not_outlive_the_step_written_again(tmp_path: Path) -> None:
    ckpt = Checkpointer(config(tmp_path, "no").checkpoint, tmp_path)
    dead = ckpt.path(2)
    (dead / "policy").mkdir(parents=True)
    for stray in (
        "rank00003-of-00004.safetensors",
        ".tmp8f2e",
        "policy/model-00002-of-00002.safetensors",
    ):
        (dead / stray).write_bytes(b"half")
    path = write_checkpoint(ckpt, 2)  # this run gets to step 2 and saves it
    written = {str(f.relative_to(path)) for f in path.rglob("*") if f.is_file()}
    assert written == {e["path"] for e in json.loads((path / MANIFEST).read_text())["files"]} | {
        MANIFEST
    }
    assert problem(path) is None


def test_auto_without_checkpoint_starts_fresh(tmp_path: Path, one_rank: None) -> None:
    assert (
        resume_point(
            config(tmp_path, "auto"),
            Checkpointer(config(tmp_path, "auto").checkpoint, tmp_path),
            SPEC,
        )
        is None
    )


def test_auto_with_only_broken_checkpoints_starts_fresh_and_moves_nothing(
    tmp_path: Path, one_rank: None, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = config(tmp_path, "auto")
    ckpt = Checkpointer(cfg.checkpoint, tmp_path)
    no_manifest(write_checkpoint(ckpt, 2))
    assert resume_point(cfg, ckpt, SPEC) is None
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and "step_000002 skipped: no manifest.json" in lines[0]
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt"] and ckpt.folders() == [ckpt.path(2)]


def test_no_never_resumes_and_yes_needs_a_complete_one(tmp_path: Path, one_rank: None) -> None:
    ckpt = Checkpointer(config(tmp_path, "no").checkpoint, tmp_path)
    write_checkpoint(ckpt, 2)
    assert resume_point(config(tmp_path, "no"), ckpt, SPEC) is None
    assert problem(ckpt.path(2)) is None  # left where it was (run_folder refuses such a start)
    (ckpt.path(2) / MANIFEST).unlink()
    with pytest.raises(
        FileNotFoundError, match="--checkpoint.resume yes: no complete checkpoint in"
    ):
        resume_point(config(tmp_path, "yes"), ckpt, SPEC)


def test_a_restart_of_the_launch_that_sealed_it_trusts_the_untouched_files(tmp_path: Path) -> None:
    path = write_checkpoint(Checkpointer(config(tmp_path, "no").checkpoint, tmp_path, "job-7"), 2)
    assert json.loads((path / MANIFEST).read_text())["launch"] == "job-7"
    f = path / "rank00001-of-00002.safetensors"
    sealed = f.stat().st_mtime_ns
    flip(path)  # bytes changed behind the manifest's back, the time put back: not read
    os.utime(f, ns=(sealed, sealed))
    assert problem(path, launch="job-7") is None
    # another launch resuming from it reads every byte back
    assert "sha256 differs" in (problem(path, launch="job-8") or "")
    assert "sha256 differs" in (problem(path) or "")
    os.utime(f, ns=(sealed + 10**9, sealed + 10**9))  # written again since: read back
    assert "sha256 differs" in (problem(path, launch="job-7") or "")
