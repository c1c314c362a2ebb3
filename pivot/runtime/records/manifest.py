"""A checkpoint's manifest: every file of the checkpoint with its size and sha256, written last.

A checkpoint folder is complete only when `manifest.json` exists and every file it lists has
the listed size and digest. Each writer fsyncs its files before reporting their digests
(`seal`); the manifest goes to a temporary name, is fsynced and renamed over its final name
(atomic), then the folder is fsynced. A job killed at any moment leaves either no manifest or a
complete checkpoint; bytes damaged afterwards (a truncated copy, a flipped bit) fail `problem`.

A restart of the launch that sealed a checkpoint (the same launch id, pivot/runtime/records/
run_folder.py) skips the digest of a file whose size and modification time are still those it
was sealed with: nothing has written it since, and at a large model's scale reading it all back
costs as much again as the trainer's load that follows (a 72B policy's checkpoint with its AdamW
state is over 1 TB). A checkpoint another launch resumes from is read back in full.
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
    mtime_ns: int = 0  # when it was sealed (0: not recorded, by an older Pivot)


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
        st = file.stat()
        out.append(FileDigest(str(file.relative_to(root)), st.st_size, digest, st.st_mtime_ns))
        folders.add(file.parent)
    for folder in folders:
        _fsync_dir(folder)
    return out


def write_manifest(root: Path, files: Iterable[FileDigest], launch: str = "") -> None:
    """The last write of a checkpoint: after it the folder is complete. `launch`: the id of the
    launch writing it, whose restarts may trust the files' sizes and times."""
    entries = sorted((asdict(f) for f in files), key=lambda e: e["path"])
    tmp = root / (MANIFEST + ".tmp")
    with open(tmp, "w") as f:
        json.dump({"launch": launch, "files": entries}, f, indent=1)
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


def problem(root: Path, part: tuple[int, int] = (0, 1), launch: str = "") -> str | None:
    """What is wrong with checkpoint `root`, in one line, or None when it is complete. `part`
    = (k, n) checks only the k-th of n interleaved shares of the files (largest first), so n
    ranks can read a large checkpoint back together; the manifest itself every share checks.
    `launch`: this launch's id; files of a checkpoint it sealed itself that still have their
    sealed size and time are not read back."""
    file = root / MANIFEST
    if not file.is_file():
        return f"no {MANIFEST} (the job stopped before the checkpoint was complete)"
    try:
        manifest = json.loads(file.read_text())
        files = [FileDigest(**e) for e in manifest["files"]]
        sealed_here = bool(launch) and manifest.get("launch") == launch
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        return f"{MANIFEST} unreadable: {type(e).__name__}: {e}"
    k, n = part
    for entry in sorted(files, key=lambda e: (-e.size, e.path))[k::n]:
        full = root / entry.path
        if not full.is_file():
            return f"{entry.path}: missing (listed in {MANIFEST})"
        st = full.stat()
        if st.st_size != entry.size:
            return f"{entry.path}: {st.st_size} bytes, {MANIFEST} says {entry.size} (truncated or overwritten)"
        if sealed_here and entry.mtime_ns and st.st_mtime_ns == entry.mtime_ns:
            continue
        with open(full, "rb") as f:
            if hashlib.file_digest(f, "sha256").hexdigest() != entry.sha256:
                return f"{entry.path}: sha256 differs from {MANIFEST} (corrupt)"
    return None
