"""Every way out of a job lets go of what it held (pivot/runtime/job/resources.py): a run that
succeeds, one that refuses bad input (before GPS exists and after it does), one whose worker
fails and one stopped by a SIGTERM leave no non-daemon thread, no process group and no shared
memory behind them.

One rank without torchrun (the cheapest job): a child process runs `launch.run` and, where it
returns or raises, reports what is left in it; the shared memory is looked for from here, by the
namespace of the job's GPS files (a run id of this test's own: no other job on the machine
shares it)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow

CHILD = """
import fcntl, json, os, signal, sys, threading
import torch.distributed as dist
from pivot.cli import parse_or_exit
from pivot.runtime.job import launch

mode, report, run_dir, argv = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
if mode == "failure":  # a training step raises in the worker loop (as a CUDA error would)
    from pivot.roles.training import TrainingRole

    def fail(self, batch):
        raise RuntimeError("injected training failure")

    TrainingRole.train_step = fail
try:
    outcome = launch.run(parse_or_exit(argv))
except Exception as e:
    outcome = f"{type(e).__name__}: {e}"


def lock_free(path):  # another open file's flock conflicts with this process's own too
    if not os.path.exists(path):
        return True
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


with open(report, "w") as f:
    json.dump({
        "outcome": outcome,
        "non_daemon": [t.name for t in threading.enumerate()
                       if not t.daemon and t is not threading.main_thread()],
        "alive": [t.name for t in threading.enumerate()],
        "process_group": dist.is_initialized(),
        "sigterm_restored": signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
                            and signal.set_wakeup_fd(-1) == -1,
        "lock_free": lock_free(os.path.join(run_dir, "run.lock")),
    }, f)
"""

SMALL = [
    "--train.steps", "1", "--train.batch-prompts", "2", "--train.group-size", "2",
    "--train.filter-groups", "0", "--rollout.max-new-tokens", "8", "--reward.max-new-tokens", "8",
    "--eval.prompts", "2", "--log.no-progress", "--log.no-tensorboard",
]  # fmt: skip
JOB_THREADS = {"pivot-controller", "pivot-sigterm", "pivot-heartbeat"}
"""What the job itself starts and a clean end joins (the launcher watch is the process's)."""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Job:
    """One rank's job in a child process, under a run id (so a GPS namespace) of its own."""

    def __init__(self, tmp_path: Path, mode: str, *flags: str) -> None:
        self.run_id = f"teardown-{uuid.uuid4().hex[:8]}"
        self.report = tmp_path / f"{mode}.json"
        self.run_dir = tmp_path / f"run-{mode}"
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC", "RANK"))}
        env |= {
            "TORCHELASTIC_RUN_ID": self.run_id,  # names GPS's files: pivot-<run id>-<attempt>_h*
            "MASTER_PORT": str(_free_port()),
            "OMP_NUM_THREADS": "1",
            "PYTHONPATH": str(ROOT),
        }
        argv = [*SMALL, "--log.dir", str(self.run_dir), *flags]
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, mode, str(self.report), str(self.run_dir), *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
            env=env,
        )

    def shm(self) -> list[str]:
        """This job's files in /dev/shm (GPS's buffers, migrated sequences' K/V)."""
        return sorted(n for n in os.listdir("/dev/shm") if n.startswith(f"pivot-{self.run_id}"))

    def finish(self, timeout: float = 300) -> tuple[int, str, dict]:
        out, _ = self.proc.communicate(timeout=timeout)
        report = json.loads(self.report.read_text()) if self.report.is_file() else {}
        return self.proc.returncode, out, report


def assert_nothing_left(job: Job, report: dict, out: str) -> None:
    assert report["non_daemon"] == [], out[-3000:]
    assert report["process_group"] is False, out[-3000:]
    assert report["sigterm_restored"] and report["lock_free"], out[-3000:]
    assert job.shm() == [], out[-3000:]


def test_a_job_that_succeeds_leaves_nothing(tmp_path: Path) -> None:
    job = Job(tmp_path, "success")
    code, out, report = job.finish()
    assert code == 0 and report["outcome"] == 0, out[-3000:]
    assert_nothing_left(job, report, out)
    assert not JOB_THREADS & set(report["alive"]), report["alive"]


@pytest.mark.parametrize("when", ["before GPS", "after GPS"])
def test_bad_input_leaves_nothing(tmp_path: Path, when: str) -> None:
    if when == "before GPS":  # the run folder's lock is taken, then no checkpoint to resume from
        flags, said = ["--checkpoint.resume", "yes"], "no complete checkpoint"
    else:  # rank 0 cannot read the dataset while it starts the controller, GPS made
        data = tmp_path / "d.parquet"
        pq.write_table(pa.Table.from_pylist([{"prompt": "1+1?", "ground_truth": "2"}] * 40), data)
        data.write_bytes(data.read_bytes()[:100])
        flags, said = ["--data.path", str(data), "--eval.path", ""], "not a readable parquet file"
    job = Job(tmp_path, "bad", *flags)
    code, out, report = job.finish()
    assert report["outcome"] == 2 and said in out, out[-3000:]
    assert_nothing_left(job, report, out)
    assert not JOB_THREADS & set(report["alive"]), report["alive"]


def test_a_failure_in_the_worker_leaves_nothing(tmp_path: Path) -> None:
    job = Job(tmp_path, "failure")
    code, out, report = job.finish()
    assert report["outcome"] == "RuntimeError: injected training failure", out[-3000:]
    # the controller thread is not joined after a failure (it may wait for a rank that is gone):
    # a daemon thread, it ends with the process
    assert_nothing_left(job, report, out)


def test_a_sigterm_leaves_no_shared_memory(tmp_path: Path) -> None:
    job = Job(tmp_path, "sigterm", "--train.steps", "200")
    metrics = job.run_dir / "metrics.jsonl"
    t0 = time.monotonic()
    while not (metrics.is_file() and metrics.read_text().strip()):  # in the worker loop
        assert job.proc.poll() is None and time.monotonic() - t0 < 240, "no step in 240 s"
        time.sleep(0.25)
    held = job.shm()
    assert held, "the job holds no GPS files: nothing to check"
    job.proc.send_signal(signal.SIGTERM)
    code, out, report = job.finish(timeout=60)
    assert code == 143 and report == {}, out[-3000:]  # ended at once, through the release list
    assert job.shm() == [], (held, out[-3000:])
    hint = [line for line in out.splitlines() if line.startswith("pivot: ") and "relaunch" in line]
    assert len(hint) == 1 and str(job.run_dir) in hint[0], out[-3000:]  # rank 0's last word
