"""A SIGTERM runs a rank's last act at once and once, even while its main thread is blocked in a
C++ call (a collective, a store wait), where a plain Python handler waits for the call to end."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHILD = """
import os, signal, sys, time
from datetime import timedelta
import torch.distributed as dist
mode, out = sys.argv[1], sys.argv[2]
def last_act():
    with open(out, "a") as f:
        f.write("acted\\n")
if mode == "python":  # what launch.py had: a handler that runs when the main thread is back
    def handler(*_):
        last_act()
        os._exit(143)
    signal.signal(signal.SIGTERM, handler)
else:
    from pivot.runtime.job.sigterm import on_sigterm
    on_sigterm(last_act)
print("ready", flush=True)
if mode == "sleep":
    time.sleep(30)  # in Python: both the handler and the thread see the signal
else:
    store = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=timedelta(seconds=30))
    store.wait(["never set"], timedelta(seconds=6))  # blocked in C++ for 6 s
"""


def stop(mode: str, tmp_path: Path) -> tuple[int, float, list[str]]:
    """(exit code, seconds from SIGTERM to exit, what the last act wrote)."""
    out = tmp_path / f"{mode}.txt"
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, mode, str(out)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    time.sleep(0.5)  # into the blocking call
    t0 = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=30)
    return code, time.monotonic() - t0, out.read_text().split() if out.exists() else []


@pytest.mark.slow
def test_the_last_act_runs_at_once_while_the_main_thread_is_blocked(tmp_path: Path) -> None:
    code, seconds, acted = stop("thread", tmp_path)
    assert (code, acted) == (143, ["acted"]) and seconds < 3.0
    code, seconds, acted = stop("python", tmp_path)  # the oracle: a handler alone waits
    assert (code, acted) == (143, ["acted"]) and seconds > 4.0


def test_the_last_act_runs_once_when_both_paths_see_the_signal(tmp_path: Path) -> None:
    code, seconds, acted = stop("sleep", tmp_path)
    assert (code, acted) == (143, ["acted"]) and seconds < 3.0
