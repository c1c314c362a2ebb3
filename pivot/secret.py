"""The job secret that keys the control plane's frames, and how it reaches every rank without
travelling over the network.

- `PIVOT_JOB_SECRET` in the environment, the same on every rank: launch/slurm/pivot.sbatch
  derives one per job from a 0600 file in the user's home before `srun`, which hands the
  environment to every node. A multi-node run without it stops with a one-line error.
- A single-host run without it makes its own: the controller writes 32 random bytes to a fresh
  0600 file in a 0700 folder of the user's (`KeyFile`) and names the file in the store; the
  other ranks, on the same host, read it. The name is not a secret: another user can neither
  read the file nor plant one in the folder (both are checked to be ours and private).
"""

from __future__ import annotations

import os
import re
import secrets
import stat
import tempfile
from pathlib import Path

ENV = "PIVOT_JOB_SECRET"
MIN_CHARS = 16
_NAME = re.compile(r"[0-9a-f]{32}\.key")


def from_env() -> bytes | None:
    """The secret given in the environment (None if unset); a too short one is a one-line error."""
    value = os.environ.get(ENV)
    if value is None or value == "":
        return None
    if len(value) < MIN_CHARS:
        raise ValueError(
            f"{ENV} has {len(value)} characters; use at least {MIN_CHARS} random ones "
            "(e.g. `openssl rand -hex 32`)"
        )
    return value.encode()


def require_for(nnodes: int) -> bytes | None:
    """The environment's secret; None means a single-host run makes its own (`KeyFile`)."""
    secret = from_env()
    if secret is None and nnodes > 1:
        raise ValueError(
            f"{ENV} is not set: a multi-node run needs a per-job secret on every rank to "
            "authenticate its control plane (launch/slurm/pivot.sbatch sets one; see docs/security.md)"
        )
    return secret


def private_dir() -> Path:
    """A folder only this user can enter, checked (not trusted) if it already exists."""
    base = Path(os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir())
    folder = base / f"pivot-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(folder)
    except OSError as e:
        raise ValueError(f"cannot make the private key folder {folder}: {e}") from None
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise ValueError(
            f"{folder} is not a private folder of this user (owner uid {st.st_uid}, "
            f"mode {oct(st.st_mode & 0o777)}); remove it or set {ENV}"
        )
    return folder


class KeyFile:
    """A single-host job's own secret, in a file of the private folder."""

    def __init__(self, name: str, secret: bytes) -> None:
        self.name, self.secret = name, secret

    @classmethod
    def create(cls) -> KeyFile:
        name, secret = secrets.token_hex(16) + ".key", secrets.token_bytes(32)
        path = private_dir() / name
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(secret)
        return cls(name, secret)

    @staticmethod
    def read(name: str) -> bytes:
        if not _NAME.fullmatch(name):
            raise ValueError(f"control plane: bad key file name {name!r} in the store")
        path = private_dir() / name
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError as e:
            raise ValueError(
                f"control plane: cannot read this job's key file {path} ({e.strerror}); a run over "
                f"several hosts needs {ENV} on every rank"
            ) from None
        with os.fdopen(fd, "rb") as f:
            st = os.fstat(f.fileno())
            if st.st_uid != os.getuid() or st.st_mode & 0o077:
                raise ValueError(f"control plane: key file {path} is not private to this user")
            secret = f.read()
        if len(secret) != 32:
            raise ValueError(f"control plane: key file {path} holds {len(secret)} bytes, not 32")
        return secret

    def remove(self) -> None:
        try:
            (private_dir() / self.name).unlink()
        except (OSError, ValueError):
            pass  # already gone, or the folder changed under us: nothing left to protect
