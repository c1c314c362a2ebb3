"""A checkpoint's manifest: every file of the checkpoint with its size and sha256, written last.

A checkpoint folder is complete only when `manifest.json` exists and every file it lists has
the listed size and digest. Each writer fsyncs its files before reporting their digests
(`seal`); the manifest goes to a temporary name, is fsynced and renamed over its final name
(atomic), then the folder is fsynced. A job killed at any moment leaves either no manifest or a
complete checkpoint; bytes damaged afterwards (a truncated copy, a flipped bit) fail `problem`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path

MANIFEST = "manifest.json"


@dataclass(frozen=True)
class FileDigest:
    path: str  # relative to the checkpoint folder
    size: int
    sha256: str


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def seal(files: Iterable[Path], root: Path) -> list[FileDigest]:
    """fsync each file and the folders holding them; their digests for the manifest."""
    out, folders = [], set()
    for file in files:
        with open(file, "rb") as f:
            os.fsync(f.fileno())  # Linux flushes the inode's dirty pages through a read-only fd too
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        out.append(FileDigest(str(file.relative_to(root)), file.stat().st_size, digest))
        folders.add(file.parent)
    for folder in folders:
        _fsync_dir(folder)
    return out


def write_manifest(root: Path, files: Iterable[FileDigest]) -> None:
    """The last write of a checkpoint: after it the folder is complete."""
    entries = sorted((asdict(f) for f in files), key=lambda e: e["path"])
    tmp = root / (MANIFEST + ".tmp")
    with open(tmp, "w") as f:
        json.dump({"files": entries}, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, root / MANIFEST)
    _fsync_dir(root)


def discard(root: Path) -> None:
    """Mark a folder incomplete before it is written again (a stale manifest would vouch for
    files that are about to change)."""
    (root / MANIFEST).unlink(missing_ok=True)
    if root.is_dir():
        _fsync_dir(root)


def problem(root: Path, part: tuple[int, int] = (0, 1)) -> str | None:
    """What is wrong with checkpoint `root`, in one line, or None when it is complete. `part`
    = (k, n) checks only the k-th of n interleaved shares of the files (largest first), so n
    ranks can read a large checkpoint back together; the manifest itself every share checks."""
    file = root / MANIFEST
    if not file.is_file():
        return f"no {MANIFEST} (the job stopped before the checkpoint was complete)"
    try:
        files = [FileDigest(**e) for e in json.loads(file.read_text())["files"]]
    except (ValueError, KeyError, TypeError) as e:
        return f"{MANIFEST} unreadable: {type(e).__name__}: {e}"
    k, n = part
    for entry in sorted(files, key=lambda e: (-e.size, e.path))[k::n]:
        full = root / entry.path
        if not full.is_file():
            return f"{entry.path}: missing (listed in {MANIFEST})"
        size = full.stat().st_size
        if size != entry.size:
            return f"{entry.path}: {size} bytes, {MANIFEST} says {entry.size} (truncated or overwritten)"
        with open(full, "rb") as f:
            if hashlib.file_digest(f, "sha256").hexdigest() != entry.sha256:
                return f"{entry.path}: sha256 differs from {MANIFEST} (corrupt)"
    return None
