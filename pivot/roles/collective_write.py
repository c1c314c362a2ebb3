"""A file write inside a collective save: a rank that cannot write (a full disk, a lost mount, a
read-only folder) must still reach the collective that ends the save, or its peers wait there
forever. `CollectiveWrite` holds the rank's `OSError` through its block, then `agree` (in place
of the save's closing barrier) tells every rank of the group whether any failed: the ranks that
failed raise their own error, the others `PeerWriteFailed`, so the whole group leaves the save
together and the job stops in one line (pivot/runtime/job/worker.py) instead of hanging."""

from __future__ import annotations

import errno
import os
from types import TracebackType
from typing import Any

import torch
import torch.distributed as dist

from pivot import faults


class PeerWriteFailed(OSError):
    """Another rank of the group could not write its part of the save (it reports why)."""


class CollectiveWrite:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        """`path`: the file or folder the block writes (named by a peer's error)."""
        self.path = str(path)
        self.error: OSError | None = None

    def __enter__(self) -> CollectiveWrite:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> bool:
        if isinstance(error, OSError):
            self.error = error
            return True  # held until `agree`
        return False

    def agree(self, group: Any) -> None:
        """Collective over `group`, in place of the save's last barrier: raise on every rank if
        any rank's write failed."""
        on = torch.device("cuda", torch.cuda.current_device()) if _nccl(group) else None
        failed = torch.tensor([float(self.error is not None)], device=on)
        dist.all_reduce(failed, op=dist.ReduceOp.MAX, group=group)
        if self.error is not None:
            raise self.error
        if failed.item():
            raise PeerWriteFailed(errno.EIO, "another training rank could not write", self.path)


def injected_disk_full(path: str | os.PathLike[str]) -> None:
    """PIVOT_FAULTS=disk_full:train:@N: the N-th save on this rank fails as on a full disk (the
    recovery tests' way to fill one; pivot/faults.py)."""
    if faults.ACTIVE and faults.happens("disk_full", "train"):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


def _nccl(group: Any) -> bool:
    return dist.get_backend(group) == "nccl"
