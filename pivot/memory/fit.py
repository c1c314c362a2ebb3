"""Which cluster `--dry-run` plans for, and the fewest nodes a configuration fits on.

A paper preset leaves its cluster to the launcher: the nodes sbatch or torchrun start, their
devices, and the devices' memory. The dry run takes each from its flag where one is given
(`--cluster.nnodes`, `--cluster.devices-per-node`, `--cluster.gpu-memory-gb`), else the device
memory from this machine's GPU (the sbatch template's preflight runs on a node of the job), else
from the node the preset was sized for (`configs.presets.PAPER_NODE`: the paper's H20), and says
which. Without `--cluster.nnodes` it plans for the fewest nodes the configuration fits on.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from pivot.config import ConfigError, PivotConfig

if TYPE_CHECKING:  # configs/ is imported where it is used: it sits beside pivot/
    from configs.presets import NodeShape

MOST_NODES = 256  # the search's end: beyond it a configuration is reported as never fitting


def device_memory_gb() -> float | None:
    """This machine's first CUDA device's memory in GB (1e9 bytes), None without one."""
    import torch

    if not torch.cuda.is_available():
        return None
    return torch.cuda.get_device_properties(0).total_memory / 1e9


def assumed_node(preset: str) -> NodeShape | None:
    """The node a paper preset was sized for; None for the tiny preset (and unknown names)."""
    from configs.presets import PAPER_NODE, PAPER_WORLD

    return PAPER_NODE if preset in PAPER_WORLD else None


def pools(cfg: PivotConfig) -> int:
    """Devices of the training pool and one replica of each inference role."""
    return (
        cfg.train.pool + cfg.rollout.replicas * cfg.rollout.tp + cfg.reward.replicas * cfg.reward.tp
    )


def resolve_node(
    cfg: PivotConfig, read_memory: Callable[[], float | None] = device_memory_gb
) -> tuple[PivotConfig, list[str]]:
    """`cfg` with devices per node and device memory filled in as the dry run plans them, and one
    line per value that did not come from a flag, saying where it came from."""
    c, node, notes = cfg.cluster, assumed_node(cfg.preset), []
    per_node, memory = c.devices_per_node, c.gpu_memory_gb
    if not per_node and node is not None:
        per_node = node.devices
        notes.append(
            f"devices per node: {per_node}, assumed (the preset was sized on the paper's "
            f"{node.name} nodes); set --cluster.devices-per-node for yours"
        )
    if not memory:
        read = read_memory() if c.device in ("auto", "cuda") else None
        if read is not None:
            memory = round(read, 2)
            notes.append(f"device memory: {memory:g} GB, read from cuda:0")
        elif node is not None:
            memory = node.gpu_memory_gb
            notes.append(
                f"device memory: {memory:g} GB, assumed (the paper's {node.name}; no GPU here); "
                "set --cluster.gpu-memory-gb for yours"
            )
    cluster = dataclasses.replace(c, devices_per_node=per_node, gpu_memory_gb=memory)
    return cfg.replace(cluster=cluster), notes


def shape_problem(cfg: PivotConfig, nnodes: int, per_node: int) -> str | None:
    """Why `cfg` cannot run on `nnodes` nodes of `per_node` devices (role sizes, room for one
    replica of each role beside the training pool), or None. `cfg`'s training pool may still be
    a share of the world."""
    world = nnodes * per_node
    fitted = cfg.fit_world(world)
    try:
        fitted.check_shape(world, per_node)
    except ConfigError as e:
        return str(e)
    return fitted.room_problem(world)


def fewest_nodes(
    cfg: PivotConfig, per_node: int, fits: Callable[[PivotConfig, int], bool]
) -> int | None:
    """The fewest nodes of `per_node` devices on which `cfg` (its training pool fitted to the
    world) has a valid shape and `fits(fitted_cfg, nnodes)`; None up to `MOST_NODES`."""
    for nnodes in range(1, MOST_NODES + 1):
        if shape_problem(cfg, nnodes, per_node) is None and fits(
            cfg.fit_world(nnodes * per_node), nnodes
        ):
            return nnodes
    return None


def with_micro_batch_budget(cfg: PivotConfig, policy: Path, world: int) -> PivotConfig:
    """`cfg` with `train.micro_batch_tokens` 0 (auto) made the memory plan's budget for this
    job's training devices (pivot/memory/plan.py `fitting_budget`): the policy folder's shapes,
    the training pool it starts with, the device memory from --cluster.gpu-memory-gb or this
    rank's GPU (the ranks' GPUs are alike; the guard splits a step that would not fit after
    all). Any other value is kept."""
    from pivot.memory.footprint import from_folder
    from pivot.memory.plan import GB, fitting_budget

    t = cfg.train
    if t.micro_batch_tokens:
        return cfg
    memory = cfg.cluster.gpu_memory_gb or (
        device_memory_gb() if cfg.cluster.device in ("auto", "cuda") else None
    )
    devices = world if cfg.cluster.mode == "colocated" else t.pool
    longest = cfg.rollout.max_prompt_tokens + cfg.longest_response()[0]
    footprint = from_folder(policy, cfg.model.dtype)
    budget = fitting_budget(footprint, devices, t, int((memory or 0) * GB), longest)
    return cfg.replace(train=dataclasses.replace(t, micro_batch_tokens=budget))
