"""Start-up shared by every rank: distributed init, slots and groups, then the worker loop."""
from __future__ import annotations

import datetime
import os

import torch
import torch.distributed as dist

from pivot.config import PivotConfig
from pivot.dist import ClusterSpec, SlotTable, create_groups, describe


def resolve_device(cfg: PivotConfig) -> str:
    if cfg.cluster.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return cfg.cluster.device


def init_distributed(device: str, spec: ClusterSpec) -> None:
    if dist.is_initialized():
        return
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    if device == "cuda":
        torch.cuda.set_device(spec.local_rank)
    backend = "cpu:gloo,cuda:nccl" if device == "cuda" else "gloo"
    dist.init_process_group(backend, world_size=spec.world_size, rank=spec.rank, timeout=datetime.timedelta(minutes=10))


def summary(cfg: PivotConfig, spec: ClusterSpec, table: SlotTable, device: str) -> str:
    return "\n".join([
        f"pivot: preset {cfg.preset}, mode {cfg.cluster.mode}, planner {cfg.planner.strategy}, device {device}",
        describe(spec, table),
        f"  policy {cfg.model.policy or '<embedded tiny>'} (rollout TP{cfg.rollout.tp}), "
        f"genrm {cfg.model.genrm or '<embedded tiny>'} (reward TP{cfg.reward.tp}), training pool {cfg.train.devices}",
    ])


def run(cfg: PivotConfig) -> int:
    spec = ClusterSpec.from_env()
    device = resolve_device(cfg)
    table = SlotTable.build(spec, cfg.rollout.tp, cfg.reward.tp, cfg.train.devices)
    init_distributed(device, spec)
    create_groups(table)
    if spec.rank == 0:
        print(summary(cfg, spec, table, device), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0
