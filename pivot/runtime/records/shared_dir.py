"""A multi-host job's checkpoint folder must be one folder on every host: the training ranks
write their shards there wherever they run, rank 0 the manifest, and a restart reads them back on
every rank. A folder local to each host would let a run train for hours and then fail to resume;
this check (collective, at start-up) says so in one line before anything is loaded."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import torch.distributed as dist

from pivot.dist import ClusterSpec


def unshared_hosts(folder: Path, spec: ClusterSpec) -> list[str]:
    """The hosts (names) that do not see a file rank 0 wrote into `folder`; every rank calls it."""
    probe = [f".pivot-shared-probe-{os.urandom(8).hex()}" if spec.rank == 0 else ""]
    if spec.rank == 0:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / probe[0]).write_bytes(b"")
    dist.broadcast_object_list(probe, src=0)
    seen: list[Any] = [False] * spec.world_size  # then (sees the file, host name) per rank
    dist.all_gather_object(seen, ((folder / probe[0]).is_file(), socket.gethostname()))
    if spec.rank == 0:
        (folder / probe[0]).unlink()
    return sorted({host for ok, host in seen if not ok})


def check_shared(folder: Path, spec: ClusterSpec) -> None:
    """Raise ValueError naming the hosts that do not share `folder` with rank 0 (multi-host only)."""
    if spec.nnodes <= 1:
        return
    missing = unshared_hosts(folder, spec)
    if missing:
        raise ValueError(
            f"checkpoint.dir {folder} is not shared: {', '.join(missing)} cannot see a file rank 0 "
            "wrote there; checkpoints need a filesystem every host mounts at the same path "
            "(docs/multinode.md)"
        )
