"""One job per run folder: rank 0 holds an exclusive lock on `run.lock` in it for as long as the
job lives.

Two jobs writing one folder interleave their metrics, garble the timeline, train and count
their samples twice and then both fail to sum it up. So before anything is written into a run
folder, rank 0 takes `fcntl.flock(LOCK_EX | LOCK_NB)` on its `run.lock` and keeps the file
open; a second job finds it taken and stops in one line naming the holder (its launch, host,
pid and start, which the holder writes into the file). The kernel drops the lock whatever ends
the holder (an exit, an exception, SIGKILL, the OOM killer), so a stale lock cannot exist on
the host: a torchrun restart of the same job (whose earlier rank 0 is dead) takes it again,
as does any later job. On a shared file system (several hosts) the lock is the file system's
(NFSv4 maps flock to its byte-range locks, released when the holder's lease ends).
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from datetime import UTC, datetime
from pathlib import Path

LOCK = "run.lock"


class RunLock:
    """The held lock on `folder/run.lock` (`acquire`); `release()` or the process's end frees it."""

    def __init__(self, folder: Path, fd: int) -> None:
        self.folder, self._fd = folder, fd

    @classmethod
    def acquire(cls, folder: Path, launch: str) -> RunLock:
        """Take the folder's lock (creating the folder and the file if needed); ValueError (one
        line naming the holder) when another live job holds it."""
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise ValueError(
                f"run folder {folder} is in use by another job ({holder}): wait for it to end, "
                "or give another --log.dir"
            ) from None
        mine = {
            "launch": launch,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "since": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(mine).encode(), 0)
        return cls(folder, fd)

    def release(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)  # closing the last descriptor drops the flock
            self._fd = -1


def _holder(fd: int) -> str:
    """The holder as it described itself, in words (what a refused job prints)."""
    try:
        raw = os.pread(fd, 4096, 0)
        h = json.loads(raw)
        return f"launch {h['launch']}, host {h['host']}, pid {h['pid']}, since {h['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "its holder did not say who it is"
