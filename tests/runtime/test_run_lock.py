"""One job per run folder (pivot/runtime/records/run_lock.py): the lock's rules, in one process
and across two; the main job refusing a second job in tests/runtime/test_bad_runs.py."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pivot.runtime.records.run_lock import LOCK, RunLock
from tests.conftest import ROOT

HOLD = (
    "import sys, time\n"
    "from pathlib import Path\n"
    "from pivot.runtime.records.run_lock import RunLock\n"
    "lock = RunLock.acquire(Path(sys.argv[1]), 'other-launch')\n"
    "print('held', flush=True)\n"
    "time.sleep(120)\n"
)


def test_a_second_holder_is_refused_in_one_line_naming_the_first(tmp_path: Path) -> None:
    first = RunLock.acquire(tmp_path / "run", "launch-a")
    holder = json.loads((tmp_path / "run" / LOCK).read_text())
    assert holder["launch"] == "launch-a" and holder["pid"] > 0
    with pytest.raises(ValueError, match=r"in use by another job \(launch launch-a, host ") as e:
        RunLock.acquire(tmp_path / "run", "launch-b")
    assert "\n" not in str(e.value) and "--log.dir" in str(e.value)
    first.release()
    RunLock.acquire(tmp_path / "run", "launch-b").release()  # free again once released


def test_a_dead_holders_lock_is_free_without_cleaning_up(tmp_path: Path) -> None:
    """SIGKILL the holder: the kernel drops its flock; its file stays and is taken over."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(tmp_path / "run")],
        stdout=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": str(ROOT)},
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    with pytest.raises(ValueError, match="launch other-launch"):
        RunLock.acquire(tmp_path / "run", "mine")
    proc.kill()
    proc.wait()
    lock = RunLock.acquire(tmp_path / "run", "mine")  # a restart, or any later job
    assert json.loads((tmp_path / "run" / LOCK).read_text())["launch"] == "mine"
    lock.release()
