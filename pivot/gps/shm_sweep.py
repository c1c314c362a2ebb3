"""Which of Pivot's /dev/shm files belong to a job that is gone, and their removal.

A GPS buffer holds a model twice (double-buffered): 30 GB for a 7B model in bf16, in host memory
until someone unlinks it. Its creator (a host's local rank 0) holds an exclusive `flock` on it
for as long as it lives (`SharedBuffer`), and the kernel drops that lock whatever ends the
process: a normal exit, an exception, torchrun's SIGTERM, a SIGKILL or the OOM killer. So a
GPS file whose lock can be taken has no creator left, and its job attempt (the namespace in its
name, `pivot-<job>-<attempt>_h<host>_<model>`) is over: every file of that namespace on that host
goes, the exported K/V of its migrating sequences included (`<namespace>_h<host>_kv...`).
A job starting on a host sweeps this way first, so neither a restarted attempt nor an unrelated
job that failed before it leaves a model's bytes behind.
"""

from __future__ import annotations

import fcntl
import os
import re
import time

from pivot.gps.shm import CREATING, HEADER_BYTES, MAGIC, W_MAGIC

SHM = "/dev/shm"
GPS_NAME = re.compile(r"^(pivot-.+)_h(\d+)_[A-Za-z0-9._-]+$")
STALE_CREATING_S = 60.0
"""A half-created file this old whose lock is free was left by a creator that died."""


def remove_namespaces(namespaces: list[str], host: int) -> list[str]:
    """Delete `host`'s files of every namespace in `namespaces`; returns the paths removed."""
    return [
        f"{SHM}/{name}"
        for name in _names()
        if any(name.startswith(f"{ns}_h{host}_") for ns in namespaces) and _unlink(f"{SHM}/{name}")
    ]


def dead_gps_files() -> list[str]:
    """GPS buffers on this machine whose creator is gone (their lock is free), and half-created
    ones a dead creator left (older than `STALE_CREATING_S`)."""
    dead = []
    for name in _names():
        path = f"{SHM}/{name}"
        if CREATING in name:
            if _age_s(path) > STALE_CREATING_S and _unlocked_gps(path, check_magic=False):
                dead.append(path)
        elif GPS_NAME.match(name) and _unlocked_gps(path, check_magic=True):
            dead.append(path)
    return dead


def remove_dead_namespaces() -> list[str]:
    """Remove every file of each job attempt whose GPS creator is gone, on the host its name
    gives, and the half-created files; returns the paths removed."""
    dead: set[tuple[str, int]] = set()
    removed = []
    for path in dead_gps_files():
        if CREATING in path:
            if _unlink(path):
                removed.append(path)
        else:  # `dead_gps_files` keeps only names GPS_NAME matches
            match = GPS_NAME.match(os.path.basename(path))
            assert match is not None
            dead.add((match.group(1), int(match.group(2))))
    for host in sorted({h for _, h in dead}):
        removed += remove_namespaces(sorted(ns for ns, h in dead if h == host), host)
    return removed


def _names() -> list[str]:
    return [n for n in os.listdir(SHM) if n.startswith("pivot-")] if os.path.isdir(SHM) else []


def _unlink(path: str) -> bool:
    """Whether `path` was removed here: False when another sweep on this machine (another
    emulated host) got there first."""
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


def _age_s(path: str) -> float:
    try:
        return time.time() - os.stat(path).st_mtime
    except FileNotFoundError:
        return 0.0


def _unlocked_gps(path: str, check_magic: bool) -> bool:
    """Whether `path` is a GPS buffer (its header's magic word) whose creator's lock is free.
    Files that are not GPS buffers (exported K/V, vLLM's weights) carry no lock: never judged."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        if check_magic:
            head = os.pread(fd, HEADER_BYTES, 0)
            if len(head) < 8 * (W_MAGIC + 1):
                return False
            if int.from_bytes(head[8 * W_MAGIC : 8 * W_MAGIC + 8], "little") != MAGIC:
                return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # its creator is alive
        return True
    finally:
        os.close(fd)  # drops the lock taken above
