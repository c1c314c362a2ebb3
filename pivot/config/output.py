"""Configuration sections of what a run writes: its logs and metrics (`LogConfig`) and its
checkpoints (`CheckpointConfig`). Part of the tree of `pivot.config`, which re-exports both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pivot.bad_input import check as _check


@dataclass
class LogConfig:
    dir: str = ""
    """Run folder: metrics.jsonl, timeline.jsonl, TensorBoard events, checkpoints; empty = a new
    folder runs/<UTC start>-<preset> per run (a torchrun restart keeps its job's), runs/latest
    links to the newest. A folder given is used as it is."""
    tensorboard: bool = True
    """Also write TensorBoard scalars."""
    progress: bool = True
    """Show a progress bar on rank 0."""
    verify_weights: bool = False
    """After every shift up, report a checksum of the replica's weights (tests compare it with GPS)."""
    wandb: bool = False
    """Also log metrics to Weights & Biases (needs `pip install wandb`; offline unless WANDB_MODE says otherwise)."""
    wandb_project: str = "pivot"
    """Weights & Biases project name."""


@dataclass
class CheckpointConfig:
    dir: str = ""
    """Checkpoint folder; empty = <log.dir>/checkpoints."""
    every: int = 4
    """Save every K steps (0 = only at the end)."""
    resume: Literal["no", "yes", "auto"] = "no"
    """Continue from the newest complete checkpoint: no (start fresh; a --log.dir or
    --checkpoint.dir holding a run's checkpoints is refused), yes (fail without one; a bare
    --checkpoint.resume means yes), auto (resume if there is one, else start fresh: what the launch
    scripts pass, so torchrun --max-restarts recovers from a dead rank). Without --log.dir, yes and
    auto continue this job's run folder (same torchrun run id); yes else the run runs/latest
    names (started last), never another. Damaged checkpoints are skipped; auto with only
    damaged ones stops, changing nothing."""
    keep: int = 0
    """Keep the newest N complete checkpoints, removing older ones once a new one is complete
    (0 = keep all)."""

    def __post_init__(self) -> None:
        _check(self.every >= 0, "checkpoint.every", self.every, "must be >= 0")
        _check(self.keep >= 0, "checkpoint.keep", self.keep, "must be >= 0 (0 = keep all)")
