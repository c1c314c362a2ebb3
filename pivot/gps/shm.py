"""One model's double-buffered host copy in a /dev/shm file, with a seqlock-style header.

Layout of the file: a 4 KiB header of int64 words, then two slots of `slot_bytes` each. A writer
fills the slot that is *not* published (version v goes to slot v % 2), bracketing it with the
slot's sequence counter (odd while writing); a reader copies the published slot and accepts the
copy only if that slot's counter was even and unchanged across the copy and its version matches.
"""

from __future__ import annotations

import fcntl
import os

import torch

HEADER_BYTES = 4096
CREATING = ".creating-"  # suffix (and pid) of a GPS file not yet renamed into place
MAGIC = 0x5049564F54475053  # "PIVOTGPS"
# header word indices
W_MAGIC, W_PUB_SLOT, W_PUB_VERSION = 0, 1, 2
W_SEQ = (3, 4)  # per-slot sequence counter: odd while a write is in progress
W_VERSION = (5, 6)  # per-slot version it holds
HEADER_WORDS = 8


def shm_path(namespace: str, host: int, model: str) -> str:
    """Per-host file name; the host id in the name lets one machine play several hosts."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in model)
    return f"/dev/shm/{namespace}_h{host}_{safe}"


def pin(raw: torch.Tensor) -> bool:
    """Page-lock this process's mapping of a GPS buffer (async, full-bandwidth H2D copies);
    False without CUDA or when the driver refuses. Registration is per process and per mapping:
    each rank registers the mapping it made, once (`GPSStore.register` maps each model once)."""
    if not torch.cuda.is_available():
        return False
    err = torch.cuda.cudart().cudaHostRegister(raw.data_ptr(), raw.numel() * raw.element_size(), 0)
    return int(err) == 0


class SharedBuffer:
    """A mapped shm file: `header` (int64 words) and `slot(i)` (uint8) views into it."""

    def __init__(self, path: str, slot_bytes: int, create: bool) -> None:
        self.path = path
        self.slot_bytes = slot_bytes
        self.size = HEADER_BYTES + 2 * slot_bytes
        if not create and (not os.path.exists(path) or os.path.getsize(path) != self.size):
            raise FileNotFoundError(
                f"GPS buffer {path} missing or of the wrong size (want {self.size} B)"
            )
        self.owner = create
        self._lock_fd = -1
        if create:
            self.raw = self._create_locked()
        else:
            self.raw = torch.from_file(path, shared=True, size=self.size, dtype=torch.uint8)
        self.header = self.raw[:HEADER_BYTES].view(torch.int64)
        self._pinned = pin(self.raw)

    def _create_locked(self) -> torch.Tensor:
        """Create the file under a temporary name, take its lock, write the header, then rename it
        into place: a file under the real name always has a header and a holder of its lock while
        its creator lives (`pivot/gps/shm_sweep.py` removes the ones whose creator died)."""
        tmp = f"{self.path}{CREATING}{os.getpid()}"
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, self.size)
        raw = torch.from_file(tmp, shared=True, size=self.size, dtype=torch.uint8)
        header = raw[:HEADER_BYTES].view(torch.int64)
        header.zero_()
        header[W_PUB_SLOT] = -1
        header[W_MAGIC] = MAGIC
        os.rename(tmp, self.path)
        self._lock_fd = fd
        return raw

    def slot(self, i: int) -> torch.Tensor:
        start = HEADER_BYTES + i * self.slot_bytes
        return self.raw[start : start + self.slot_bytes]

    def words(self) -> list[int]:
        return self.header[:HEADER_WORDS].tolist()

    # writer side -------------------------------------------------------------------------
    def begin(self, slot: int) -> None:
        seq = int(self.header[W_SEQ[slot]])
        self.header[W_SEQ[slot]] = seq + (1 if seq % 2 == 0 else 2)  # odd: readers back off

    def publish(self, slot: int, version: int) -> None:
        self.header[W_VERSION[slot]] = version
        self.header[W_SEQ[slot]] = int(self.header[W_SEQ[slot]]) + 1  # even again
        self.header[W_PUB_VERSION] = version
        self.header[W_PUB_SLOT] = slot

    def close(self, unlink: bool) -> None:
        if self._pinned:
            torch.cuda.cudart().cudaHostUnregister(self.raw.data_ptr())
            self._pinned = False
        if unlink and os.path.exists(self.path):
            os.unlink(self.path)
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1


def header_values_after_begin(words: list[int], slot: int) -> list[int]:
    """The header words `begin(slot)` would leave (used to update a remote host's header)."""
    out = list(words)
    seq = out[W_SEQ[slot]]
    out[W_SEQ[slot]] = seq + (1 if seq % 2 == 0 else 2)
    return out


def header_values_after_publish(words: list[int], slot: int, version: int) -> list[int]:
    out = list(words)
    out[W_VERSION[slot]] = version
    out[W_SEQ[slot]] += 1
    out[W_PUB_VERSION] = version
    out[W_PUB_SLOT] = slot
    return out


def readable(words: list[int], slot: int, version: int) -> bool:
    """True if `slot` holds `version` and no write is in progress on it."""
    return (
        words[W_SEQ[slot]] % 2 == 0
        and words[W_VERSION[slot]] == version
        and words[W_MAGIC] == MAGIC
    )
