"""The job's one teardown (pivot/runtime/job/resources.py): what is held is let go of newest
first; after a failure the steps that wait on peers are skipped; a release that fails turns the
rest into a failure's; a SIGTERM runs only what is safe beside the main thread, and the handler
goes with the job."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

import pytest

from pivot.runtime.job.resources import JobResources
from tests.conftest import ROOT


def _held(job: JobResources, done: list[str]) -> None:
    """Three resources in the order a job takes them: the groups, GPS, the last barrier."""
    job.hold(
        "groups",
        clean=lambda: done.append("destroy"),
        failed=lambda: done.append("abort"),
    )
    job.hold(
        "gps",
        clean=lambda: done.append("close"),
        failed=lambda: done.append("unlink+close"),
        ending=lambda: done.append("unlink"),
    )
    job.hold("barrier", clean=lambda: done.append("barrier"))


def test_a_clean_end_releases_newest_first() -> None:
    done: list[str] = []
    with JobResources() as job:
        _held(job, done)
    assert done == ["barrier", "close", "destroy"]


def test_a_failure_skips_what_waits_on_peers() -> None:
    done: list[str] = []
    with pytest.raises(RuntimeError, match="worker"), JobResources() as job:
        _held(job, done)
        raise RuntimeError("worker")
    assert done == ["unlink+close", "abort"]


def test_a_failed_release_turns_the_rest_into_a_failures() -> None:
    done: list[str] = []
    job = JobResources()
    _held(job, done)

    def barrier() -> None:
        raise TimeoutError("a peer never came")

    job.hold("barrier", clean=barrier)
    with pytest.raises(TimeoutError):
        job.close()
    # the first barrier (held before the one that failed) waits on peers: skipped
    assert done == ["unlink+close", "abort"]
    job.close()  # nothing is held twice
    assert done == ["unlink+close", "abort"]


def test_the_sigterm_handler_lives_as_long_as_the_job() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with JobResources():
        assert signal.getsignal(signal.SIGTERM) is not before
        assert "pivot-sigterm" in [t.name for t in threading.enumerate()]
    assert signal.getsignal(signal.SIGTERM) is before
    assert "pivot-sigterm" not in [t.name for t in threading.enumerate()]


CHILD = """
import sys, time
from pivot.runtime.job.resources import JobResources
with JobResources() as job:
    job.hold("barrier", clean=lambda: print("barrier", flush=True))
    job.hold("gps", clean=print, ending=lambda: print("unlink", flush=True))
    job.say_on_sigterm(lambda: print("last word", flush=True))
    print("ready", flush=True)
    time.sleep(30)
"""


def test_a_sigterm_releases_what_is_safe_then_ends_at_once() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"},
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=20)
    assert proc.returncode == 143 and out.split() == ["unlink", "last", "word"]


def test_outside_the_main_thread_no_handler_is_installed() -> None:
    seen: list[object] = []

    def job() -> None:
        with JobResources() as held:
            held.hold("x", clean=lambda: seen.append("released"))
            seen.append(signal.getsignal(signal.SIGTERM))

    before = signal.getsignal(signal.SIGTERM)
    thread = threading.Thread(target=job)
    thread.start()
    thread.join()
    assert seen == [before, "released"]
