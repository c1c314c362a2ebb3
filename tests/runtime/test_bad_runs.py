"""Bad input to the main job on 4 CPU ranks: a dataset it cannot read stops every rank with one
line (exit 2), and training steps whose loss is NaN are skipped and counted, then abort the job
in one line after `train.max_bad_steps` in a row, its checkpoints intact; a Ctrl-C stops it with
one line saying where to resume from. None leaves its GPS files in /dev/shm."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pivot.gps.shm_sweep import dead_gps_files
from pivot.runtime.records.manifest import problem
from tests.runtime.engine_cores import alive
from tests.runtime.models import random_models
from tests.runtime.test_runtime import check_exactly_once, rows, torchrun

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return random_models(tmp_path_factory.mktemp("models"))


def run(models: tuple[Path, Path], run_dir: Path, *flags: str) -> tuple[int, str]:
    proc = torchrun(models, run_dir, *flags, wait=False)
    assert isinstance(proc, subprocess.Popen)
    out, _ = proc.communicate(timeout=240)
    return proc.returncode, out


def test_unreadable_dataset_is_one_line_on_every_rank(
    models: tuple[Path, Path], tmp_path: Path
) -> None:
    data = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist([{"prompt": "1+1?", "ground_truth": "2"}] * 40), data)
    data.write_bytes(data.read_bytes()[:100])
    code, out = run(models, tmp_path / "run", "--data.path", str(data), "--eval.path", "")
    said = [line for line in out.splitlines() if line.startswith("pivot: cannot start")]
    assert code != 0 and said == [
        f"pivot: cannot start: dataset {data}: not a readable parquet file "
        f"({said[0].split('(', 1)[1]}"
    ], out[-3000:]
    # torchrun reports the exit codes with its own traceback; none comes from Pivot's code
    assert not [
        line for line in out.splitlines() if line.strip().startswith('File "') and "/pivot/" in line
    ], out[-3000:]


def test_nan_steps_are_skipped_then_abort_with_checkpoints_intact(
    models: tuple[Path, Path], tmp_path: Path
) -> None:
    # random rewards give every group an advantage; a learning rate of 1e30 turns the first
    # update's weights into overflowing logits, so every later loss is NaN
    verifier = tmp_path / "noisy.py"
    verifier.write_text(
        "import random\n\n\ndef score(response, ground_truth):\n    return random.random()\n"
    )
    t0 = time.time()
    code, out = run(
        models,
        tmp_path / "run",
        "--train.steps",
        "6",
        "--train.lr",
        "1e30",
        "--train.max-bad-steps",
        "2",
        "--checkpoint.every",
        "1",
        "--reward.verifier",
        f"{verifier}:score",
    )
    assert code != 0
    assert (
        "pivot: rank 3 failed: TrainStep: 2 consecutive training steps had NaN/inf loss or gradients; aborting"
        in out.splitlines()
    ), out[-3000:]
    metrics = rows(tmp_path / "run", "metrics.jsonl")
    assert [(r["step"], r["train/skipped"]) for r in metrics] == [
        (1, 0.0),
        (2, 1.0),
    ]  # the skipped step is counted
    assert [r["policy_version"] for r in metrics] == [
        1,
        2,
    ]  # and advances the version like any step
    checkpoints = sorted((tmp_path / "run" / "checkpoints").iterdir())
    assert [p.name for p in checkpoints] == ["step_000001", "step_000002"]
    assert [problem(p) for p in checkpoints] == [None, None]
    # the failed job freed its GPS files (two copies of each model in host memory) on its way out
    assert not [p for p in dead_gps_files() if os.stat(p).st_mtime >= t0]


def test_a_full_disk_at_a_checkpoint_stops_in_one_line_with_the_way_back(
    models: tuple[Path, Path], tmp_path: Path
) -> None:
    """The second checkpoint's write fails as on a full disk: every training rank leaves the
    save together (none hangs in its barrier), the job stops with one line naming the folder
    and what to change and one line saying where to resume, no traceback, the first checkpoint
    intact and the second never vouched for."""
    run_dir = tmp_path / "run"
    proc = torchrun(models, run_dir, "--train.steps", "4", "--checkpoint.every", "1", wait=False,
                    env={"PIVOT_FAULTS": "disk_full:train:@2"})  # fmt: skip
    assert isinstance(proc, subprocess.Popen)
    out, _ = proc.communicate(timeout=240)
    lines = out.splitlines()
    step2 = run_dir / "checkpoints" / "step_000002"
    failed = [line for line in lines if line.startswith("pivot: rank ") and " failed: " in line]
    assert proc.returncode != 0 and len(failed) == 1, out[-3000:]
    assert failed[0].split(": ", 2)[2].startswith(
        f"SaveCheckpoint: cannot write checkpoint {step2}: No space left on device ("
    ) and failed[0].endswith("keep fewer with --checkpoint.keep N"), failed
    assert (
        f"pivot: the newest checkpoint is {run_dir / 'checkpoints' / 'step_000001'}; relaunch "
        f"with --log.dir {run_dir} --checkpoint.resume auto to continue"
    ) in lines, out[-3000:]
    # torchrun reports the exit code with its own traceback; none comes from Pivot's code
    assert not [
        line for line in lines if line.strip().startswith('File "') and "/pivot/" in line
    ], out[-3000:]
    assert problem(run_dir / "checkpoints" / "step_000001") is None and problem(step2) is not None


def test_context_overrun_is_refused_at_startup(models: tuple[Path, Path], tmp_path: Path) -> None:
    """A judge sequence longer than the GenRM's context stops every rank before anything loads."""
    from pivot.model import ModelArgs

    limit = ModelArgs.load(models[1]).max_position_embeddings
    code, out = run(models, tmp_path / "run", "--reward.max-new-tokens", str(limit))
    said = [line for line in out.splitlines() if line.startswith("pivot: cannot start")]
    assert code != 0 and len(said) == 1, out[-3000:]
    assert (
        said[0].startswith("pivot: cannot start: reward: longest prompt ")
        and f"reward.max_new_tokens={limit}" in said[0]
    )
    assert f"max_position_embeddings={limit}" in said[0], said[0]


def test_ctrl_c_is_one_line_with_the_way_back_and_frees_host_memory(
    models: tuple[Path, Path], tmp_path: Path
) -> None:
    """A terminal's Ctrl-C (SIGINT to torchrun and every rank): rank 0 says where to resume from,
    no rank prints a traceback, and the job's GPS files are gone."""
    t0 = time.time()
    proc = torchrun(
        models, tmp_path / "run", "--train.steps", "200", "--checkpoint.every", "1", wait=False
    )
    assert isinstance(proc, subprocess.Popen)
    checkpoints = tmp_path / "run" / "checkpoints"
    # a complete checkpoint (its manifest written last), not merely a folder: a Ctrl-C while the
    # first one is written rightly says none was written yet (CI saw it once)
    while not any(checkpoints.glob("step_*/manifest.json")):
        assert proc.poll() is None and time.time() - t0 < 180, "no checkpoint in 180 s"
        time.sleep(0.5)
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=120)
    lines = out.splitlines()
    assert lines.count("pivot: interrupted.") == 1, out[-3000:]
    hint = lines[lines.index("pivot: interrupted.") + 1]
    assert hint.startswith("pivot: the newest checkpoint is ") and hint.endswith(
        f"; relaunch with --log.dir {tmp_path / 'run'} --checkpoint.resume auto to continue"
    )
    assert not [line for line in lines if line.startswith("[rank")], out[-3000:]
    assert not [p for p in dead_gps_files() if os.stat(p).st_mtime >= t0]


def _children(pid: int) -> list[int]:
    """Live processes whose parent is `pid` (from /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            out.append(int(stat.parent.name))
    return out


def _signal_tree(root: int, sig: int) -> list[int]:
    """Send `sig` to `root`, then to every process below it (torchrun starts each rank in a
    session of its own: a signal to torchrun's group reaches none of them); the pids signalled,
    root first."""
    done: list[int] = []
    todo = [root]
    while todo:
        pid = todo.pop(0)
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            continue
        done.append(pid)
        todo += [c for c in _children(pid) if c not in done]
    return done


def test_a_killed_torchrun_takes_its_ranks_with_it(
    models: tuple[Path, Path], tmp_path: Path
) -> None:
    """SIGKILL torchrun's agent alone (the OOM killer's pick): every rank notices its launcher is
    gone and ends within seconds, rank 0 says so in one line, and no GPS file is left behind."""
    t0 = time.time()
    run_dir = tmp_path / "run"
    proc = torchrun(models, run_dir, "--train.steps", "200", wait=False)
    assert isinstance(proc, subprocess.Popen)
    metrics = run_dir / "metrics.jsonl"
    while not (metrics.is_file() and metrics.read_text().strip()):
        assert proc.poll() is None and time.time() - t0 < 180, "no step trained in 180 s"
        time.sleep(0.5)
    ranks = _children(proc.pid)
    assert len(ranks) == 4, ranks
    os.kill(proc.pid, signal.SIGKILL)
    killed = time.time()
    while any(alive(r) for r in ranks) and time.time() - killed < 15:
        time.sleep(0.25)
    assert not [r for r in ranks if alive(r)], "ranks outlived their launcher by 15 s"
    out, _ = proc.communicate(timeout=30)  # the ranks held torchrun's stdout: closed now
    assert "pivot: its launcher (torchrun) is gone" in out, out[-3000:]
    steps = len(metrics.read_text().splitlines())
    time.sleep(2)
    assert len(metrics.read_text().splitlines()) == steps  # nothing trains on
    assert not [p for p in dead_gps_files() if os.stat(p).st_mtime >= t0]


def test_a_second_job_into_a_busy_run_folder_stops_in_one_line(
    models: tuple[Path, Path], tmp_path: Path
) -> None:
    """Two jobs into one --log.dir (the second with --checkpoint.resume auto, as a careless
    relaunch would): the second stops with one line naming the first, exit 2, and the first's
    records audit exactly once.

    The first job is held while the second starts: once it has trained a step (its records
    written), torchrun and every process below it are stopped (SIGSTOP: each alive, rank 0's
    flock on run.lock held, nothing trained) and continued once the second was refused. It used
    to be kept busy by 400 steps instead, trained beside the second's start-up for no other
    purpose (a minute of the suite's CPU); stopped, it outlives any start-up, however slow."""
    # steps left after the first: time to stop it in (it is polled every 20 ms; a step takes
    # tenths of a second), few to finish once it is continued
    run_dir, steps = tmp_path / "run", 6
    first = torchrun(models, run_dir, "--train.steps", str(steps), wait=False)
    assert isinstance(first, subprocess.Popen)
    metrics = run_dir / "metrics.jsonl"
    t0 = time.time()
    while not (metrics.is_file() and metrics.read_text().strip()):
        assert first.poll() is None and time.time() - t0 < 180, "the first job never trained"
        time.sleep(0.02)
    held = _signal_tree(first.pid, signal.SIGSTOP)
    try:
        assert first.poll() is None, "the first job ended before it could be held"
        trained = len(metrics.read_text().splitlines())
        assert trained < steps, "the first job trained every step before it could be held"
        second, out = run(
            models, run_dir, "--train.steps", str(steps), "--checkpoint.resume", "auto"
        )
        refused = [  # (torchrun's summary quotes the line again as the root cause)
            line for line in out.splitlines() if line.startswith("pivot: cannot start: run folder")
        ]
        assert second != 0 and len(refused) == 1, out[-3000:]  # torchrun: its ranks exited 2
        assert refused[0].startswith(f"pivot: cannot start: run folder {run_dir} is in use")
        assert first.poll() is None  # refused while the first ran, not after it ended
        # the second wrote nothing into the first's records while it started and stopped
        assert len(metrics.read_text().splitlines()) == trained
    finally:
        for pid in held:
            os.kill(pid, signal.SIGCONT)
    out, _ = first.communicate(timeout=400)
    assert first.returncode == 0, out[-3000:]
    check_exactly_once(run_dir, steps)


def test_auto_over_only_damaged_checkpoints_refuses_and_changes_nothing(
    models: tuple[Path, Path], tmp_path: Path
) -> None:
    """Every checkpoint damaged: `auto` (what a torchrun restart passes) used to start over from
    step 0 in the same folder, emptying its records and pruning the damaged checkpoints. Now it
    stops in one line naming them and the choices, and every record is as it was, byte for byte."""
    run_dir = tmp_path / "run"
    code, out = run(models, run_dir, "--train.steps", "4", "--checkpoint.every", "2")
    assert code == 0, out[-3000:]
    for step in ("step_000002", "step_000004"):
        shard = run_dir / "checkpoints" / step / "rank00000-of-00001.safetensors"
        shard.write_bytes(shard.read_bytes()[:-1] + bytes([shard.read_bytes()[-1] ^ 1]))
    before = {
        p.relative_to(run_dir): p.read_bytes()
        for p in run_dir.rglob("*")
        if p.is_file() and p.name != "run.lock"
    }
    code, out = run(models, run_dir, "--train.steps", "6", "--checkpoint.resume", "auto")
    said = [line for line in out.splitlines() if line.startswith("pivot: cannot start")]
    assert code != 0 and len(said) == 1, out[-3000:]
    assert "--checkpoint.resume auto: 2 checkpoints in " in said[0] and "damaged" in said[0]
    assert "step_000004" in said[0] and "nothing was changed" in said[0]
    after = {
        p.relative_to(run_dir): p.read_bytes()
        for p in run_dir.rglob("*")
        if p.is_file() and p.name != "run.lock"
    }
    assert after == before
