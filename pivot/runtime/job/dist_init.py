"""Distributed start-up: the job's store, the attempt every rank agrees on, the default group
and, across hosts, the heartbeats that end the job when a rank stops answering; and the groups'
end, clean or after a failure (pivot/runtime/job/resources.py says which runs when)."""

from __future__ import annotations

import datetime
import os
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _abort_process_group

from pivot.config import ClusterConfig
from pivot.dist import ClusterSpec
from pivot.runtime.job.attempt import agree_attempt
from pivot.runtime.job.liveness import Heartbeat, store_connector

TIMEOUT = datetime.timedelta(minutes=10)


def attempt_prefix(attempt: int) -> str:
    return f"pivot-attempt-{attempt}"


def init_distributed(device: str, spec: ClusterSpec) -> int:
    """Join the default group under this attempt's store prefix; returns the attempt number (0
    where torchrun made a fresh store, or without torchrun)."""
    if dist.is_initialized():
        return 0
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    if device == "cuda":
        torch.cuda.set_device(spec.local_rank)
    backend = "cpu:gloo,cuda:nccl" if device == "cuda" else "gloo"
    # torchrun keeps one store across restarts of the job: without a prefix per attempt, the
    # restarted ranks would read the dead attempt's keys (gloo peers, control-plane addresses)
    agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(
        os.environ["MASTER_ADDR"],
        int(os.environ["MASTER_PORT"]),
        spec.world_size,
        is_master=not agent and spec.rank == 0,
        timeout=TIMEOUT,
        multi_tenant=not agent,
    )
    attempt = agree_attempt(store, spec.rank, spec.world_size, TIMEOUT.total_seconds())
    dist.init_process_group(
        backend,
        store=dist.PrefixStore(attempt_prefix(attempt), store),
        world_size=spec.world_size,
        rank=spec.rank,
        timeout=TIMEOUT,
    )
    return attempt


def start_heartbeat(
    cfg: ClusterConfig, spec: ClusterSpec, attempt: int, on_dead: Callable[[str], None]
) -> Heartbeat | None:
    """Across hosts (on one, torchrun's agent sees every exit itself), unless turned off;
    `on_dead` ends this process with the verdict's line."""
    if spec.nnodes <= 1 or spec.world_size <= 1 or cfg.heartbeat_timeout_s <= 0:
        return None
    beat = Heartbeat(
        store_connector(attempt_prefix(attempt), cfg.heartbeat_timeout_s),
        rank=spec.rank,
        world_size=spec.world_size,
        timeout_s=cfg.heartbeat_timeout_s,
        on_dead=on_dead,
    )
    beat.start()
    return beat


def destroy_groups() -> None:
    """A clean end: the default group and every group made from it destroyed (every rank has
    passed the last barrier)."""
    if dist.is_initialized():
        dist.destroy_process_group()


def abort_groups() -> None:
    """After a failure: every group dropped without waiting on a peer. NCCL's destroy waits for
    the work in flight, which a dead peer never finishes; an abort does not (torch has no public
    name for it yet: it is `destroy_process_group`'s failure-time sibling)."""
    if dist.is_initialized():
        _abort_process_group()
