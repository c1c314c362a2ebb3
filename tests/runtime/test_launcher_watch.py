"""A rank torchrun started ends when torchrun does (pivot/runtime/job/launcher_watch.py): here a
stand-in launcher, SIGKILLed; the real one in tests/runtime/test_bad_runs.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from pivot.runtime.job.launcher_watch import watch_launcher
from tests.conftest import ROOT
from tests.runtime.engine_cores import alive

RANK = (
    "import time\n"
    "from pivot.runtime.job.launcher_watch import watch_launcher\n"
    "assert watch_launcher(poll_s=0.1, grace_s=1.0) is not None\n"
    "print('watching', flush=True)\n"
    "time.sleep(120)\n"
)
LAUNCHER = (
    "import subprocess, sys, time\n"
    "rank = subprocess.Popen([sys.executable, '-c', sys.argv[1]])\n"
    "print(rank.pid, flush=True)\n"
    "time.sleep(120)\n"
)


def test_a_rank_ends_within_seconds_of_its_launchers_death() -> None:
    env = {**os.environ, "TORCHELASTIC_RUN_ID": "test", "PYTHONPATH": str(ROOT)}
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, RANK], stdout=subprocess.PIPE, text=True, env=env
    )
    assert launcher.stdout is not None
    rank = int(launcher.stdout.readline())
    time.sleep(1.5)  # the rank is watching (its import and start take a moment)
    assert alive(rank)
    launcher.kill()
    launcher.wait()
    t0 = time.time()
    while alive(rank) and time.time() - t0 < 10:
        time.sleep(0.1)
    assert not alive(rank), "the rank outlived its launcher by 10 s"


def test_a_rank_not_started_by_torchrun_is_not_watched(monkeypatch: pytest.MonkeyPatch) -> None:
    """`python pivot/main.py` from a shell: the shell is no launcher to end with."""
    monkeypatch.delenv("TORCHELASTIC_RUN_ID", raising=False)
    assert watch_launcher() is None


def test_the_watch_ends_its_rank_even_when_sigterm_is_ignored() -> None:
    """A rank blocked where its SIGTERM handler cannot run still ends, `grace_s` later."""
    rank = "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\n" + RANK
    env = {**os.environ, "TORCHELASTIC_RUN_ID": "test", "PYTHONPATH": str(ROOT)}
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, rank], stdout=subprocess.PIPE, text=True, env=env
    )
    assert launcher.stdout is not None
    pid = int(launcher.stdout.readline())
    time.sleep(1.5)
    os.kill(launcher.pid, signal.SIGKILL)
    launcher.wait()
    t0 = time.time()
    while alive(pid) and time.time() - t0 < 10:
        time.sleep(0.1)
    assert not alive(pid) and time.time() - t0 >= 0.9  # the grace, then the end
