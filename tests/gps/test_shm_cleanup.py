"""A job starting on a host removes the /dev/shm files of every job attempt whose GPS creator is
gone (killed, crashed or failed without closing), and nothing of a live one's."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from pivot.gps.shm import CREATING, SharedBuffer, shm_path
from pivot.gps.shm_sweep import remove_dead_namespaces, remove_namespaces

pytestmark = pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm")

CREATOR = """
import sys, time
from pivot.gps.shm import SharedBuffer
bufs = [SharedBuffer(p, 1024, create=True) for p in sys.argv[1:]]
print("ready", flush=True)
time.sleep(600)
"""


def creator(*paths: Path) -> subprocess.Popen:
    """A process that creates GPS buffers at `paths` and lives until killed."""
    proc = subprocess.Popen(
        [sys.executable, "-c", CREATOR, *map(str, paths)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
    return proc


def test_removes_the_named_namespaces_of_one_host_only() -> None:
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


def swept(prefix: str) -> list[str]:
    """What a sweep removed of this test's files (other dead jobs' files on the machine go too)."""
    return sorted(p for p in remove_dead_namespaces() if p.startswith(f"/dev/shm/{prefix}"))


@pytest.mark.slow
def test_a_dead_creators_namespace_goes_a_live_ones_stays() -> None:
    job = f"pivot-test-{uuid.uuid4().hex[:8]}"
    dead_gps = [Path(shm_path(f"{job}-0", h, m)) for h in (0, 1) for m in ("policy", "genrm")]
    dead_kv = Path(shm_path(f"{job}-0", 0, "kv") + "_17_r0")  # a migrating sequence's export
    live_gps = Path(shm_path(f"{job}-1", 0, "policy"))
    live_kv = Path(shm_path(f"{job}-1", 0, "kv") + "_3_r0")
    not_gps = Path(shm_path(f"{job}-2", 0, "policy"))  # no GPS header: never judged
    mine = Path(shm_path(f"{job}-3", 0, "policy"))  # created by this very process
    for f in (dead_kv, live_kv):
        f.write_bytes(b"kv")
    not_gps.write_bytes(b"\0" * 64)
    own = SharedBuffer(str(mine), 1024, create=True)
    dead, live = creator(*dead_gps), creator(live_gps)
    try:
        assert not swept(job)  # every creator alive: nothing goes
        dead.kill()
        dead.wait()
        assert swept(job) == sorted(map(str, [*dead_gps, dead_kv]))
        assert all(f.exists() for f in (live_gps, live_kv, not_gps, mine))
        live.terminate()  # SIGTERM, no handler: the process ends without closing anything
        live.wait()
        assert swept(job) == sorted(map(str, [live_gps, live_kv]))
        own.close(unlink=True)  # a normal close leaves nothing behind
        assert not mine.exists() and not swept(job)
    finally:
        for proc in (dead, live):
            proc.kill()
            proc.wait()
        for f in [*dead_gps, dead_kv, live_gps, live_kv, not_gps, mine]:
            f.unlink(missing_ok=True)


def test_a_half_created_file_goes_once_it_is_old() -> None:
    job = f"pivot-test-{uuid.uuid4().hex[:8]}"
    path = Path(shm_path(f"{job}-0", 0, "policy") + f"{CREATING}1")
    path.write_bytes(b"\0" * 64)
    try:
        assert not swept(job)  # maybe being created right now
        old = time.time() - 120
        os.utime(path, (old, old))
        assert swept(job) == [str(path)]
    finally:
        path.unlink(missing_ok=True)


def test_a_created_buffer_is_complete_under_its_name() -> None:
    path = Path(shm_path(f"pivot-test-{uuid.uuid4().hex[:8]}-0", 0, "policy"))
    buf = SharedBuffer(str(path), 4096, create=True)
    try:
        reader = SharedBuffer(str(path), 4096, create=False)
        assert reader.words()[:2] == buf.words()[:2] and buf.words()[1] == -1
        assert not list(Path("/dev/shm").glob(f"{path.name}{CREATING}*"))
    finally:
        buf.close(unlink=True)
    assert not path.exists()
