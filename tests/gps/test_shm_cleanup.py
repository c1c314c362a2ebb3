"""A restarted job attempt removes the GPS files its killed predecessors left in /dev/shm, on its
own host only, and nothing else."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from pivot.gps.shm import remove_namespaces, remove_other_attempts, shm_path


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm")
def test_removes_the_dead_attempts_files_of_this_host_only() -> None:
    run = f"pivot-test-{uuid.uuid4().hex[:8]}"
    files = {
        (k, host, model): Path(shm_path(f"{run}-{k}", host, model))
        for k in range(3)
        for host in (0, 1)
        for model in ("policy", "genrm")
    }
    other = Path(shm_path(f"{run}-10", 0, "policy"))  # attempt 10 shares the prefix of attempt 1
    for f in [*files.values(), other]:
        f.write_bytes(b"x")
    try:
        removed = remove_namespaces([f"{run}-0", f"{run}-1"], host=0)
        assert sorted(removed) == sorted(
            str(f) for (k, h, _), f in files.items() if k < 2 and h == 0
        )
        assert {key for key, f in files.items() if f.exists()} == {
            key for key in files if key[0] == 2 or key[1] == 1
        }
        assert other.exists()
    finally:
        for f in [*files.values(), other]:
            f.unlink(missing_ok=True)


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm")
def test_a_new_attempt_removes_every_other_attempt_of_its_job_on_its_host() -> None:
    job = f"pivot-test-{uuid.uuid4().hex[:8]}"
    other_job = f"{job}x"
    files = {
        (name, host): Path(shm_path(name, host, "policy"))
        for name in (f"{job}-0", f"{job}-3", f"{job}-12", f"{other_job}-0")
        for host in (0, 1)
    }
    for f in files.values():
        f.write_bytes(b"x")
    try:
        removed = remove_other_attempts(f"{job}-3", host=0)
        assert sorted(removed) == sorted(
            str(files[(n, 0)]) for n in (f"{job}-0", f"{job}-12")
        )  # attempt numbers need not be below this one: a new store counts from 0 again
        assert {key for key, f in files.items() if f.exists()} == {
            (f"{job}-3", 0),
            (f"{other_job}-0", 0),
            *((n, 1) for n, _ in files),
        }
    finally:
        for f in files.values():
            f.unlink(missing_ok=True)
