"""Replays one training step from a checkpoint and compares it with the next checkpoint.

Checkpoint K holds the trainer's state after K steps and the sample buffer as it was then. When
that buffer already held every reward of step K+1's batch (the rollouts of the next steps run
ahead of training, within the staleness bound), training step K+1 is fully determined by the
checkpoint: this rebuilds the trainer from checkpoint K, takes step K+1's batch from the buffer as
the controller does, checks it is the batch the run logged (samples.jsonl: the same samples with
the same rewards), trains one step and compares every weight with checkpoint K+1's policy.
Steps count from 1, as every record does: step K+1 is the one that checkpoint K+1 follows.
One training rank only (the replay runs in this process, as a group of one); runs whose training
pool is larger are not replayed.
"""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pivot.config import TrainConfig
from pivot.runtime.records.checkpoint import PREFIX, STATE_FILE


@dataclass
class Replay:
    step: int
    """The step replayed (from 1): from checkpoint `step - 1` to checkpoint `step`."""
    max_abs_diff: float
    """Largest |replayed - checkpointed| over every weight (0.0: bit-identical)."""
    tensors: int


def replayable(checkpoints: Path, step: int, group_size: int, staleness: int) -> bool:
    """Checkpoint `step - 1` holds step `step`'s whole batch, and checkpoint `step` exists."""
    from pivot.rl.buffer import SampleBuffer

    here, after = (
        checkpoints / f"{PREFIX}{step - 1:06d}",
        checkpoints / f"{PREFIX}{step:06d}" / "policy",
    )
    if not (here / STATE_FILE).is_file() or not after.is_dir():
        return False
    buffer = SampleBuffer(group_size, staleness)
    buffer.load_state_dict(json.loads((here / STATE_FILE).read_text())["buffer"])
    return step - 1 in buffer.open_steps() and buffer.ready(step - 1)  # the buffer counts from 0


def replay_step(
    checkpoints: Path,
    step: int,
    train: TrainConfig,
    temperature: float,
    logged: list[dict[str, Any]],
) -> Replay:
    """`logged`: samples.jsonl rows of the run (the step's rows are compared with the batch)."""
    import torch
    import torch.distributed as dist
    from safetensors.torch import load_file

    from pivot.rl.batch import batch_from_groups
    from pivot.rl.buffer import SampleBuffer
    from pivot.roles.trainer import Trainer

    if train.devices != 1:
        raise ValueError(
            f"replay runs one training rank; this run trained on train.devices={train.devices}"
        )
    here = checkpoints / f"{PREFIX}{step - 1:06d}"
    buffer = SampleBuffer(train.group_size, train.staleness)
    buffer.load_state_dict(json.loads((here / STATE_FILE).read_text())["buffer"])
    groups = buffer.take_batch(step - 1)
    got = sorted(
        (s.step + 1, s.prompt_id, s.sample_idx, s.reward, s.text) for g in groups for s in g
    )
    want = sorted(
        (r["step"], r["prompt"], r["sample"], r["reward"], r["response"])
        for r in logged
        if r["step"] == step
    )
    if got != want:
        raise ValueError(
            f"checkpoint {here} holds another batch of step {step} than the run trained (samples.jsonl)"
        )
    batch = batch_from_groups(
        groups
    )  # as the controller builds it (samples carry their prompt ids)
    own_group = not dist.is_initialized()
    if own_group:
        store = dist.FileStore(os.path.join(tempfile.mkdtemp(prefix="pivot-replay-"), "store"), 1)
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    try:
        world = dist.group.WORLD
        if world is None:  # initialized above, or by the caller
            raise RuntimeError("replay: no default process group")
        trainer = Trainer.from_pretrained(
            here / "policy", world, train, device="cpu", temperature=temperature
        )
        trainer.load(here)
        trainer.train_step(batch)
        replayed = trainer.full_state_dict()
    finally:
        if own_group:
            dist.destroy_process_group()
    saved: dict[str, torch.Tensor] = {}
    for f in sorted((checkpoints / f"{PREFIX}{step:06d}" / "policy").glob("*.safetensors")):
        saved.update(load_file(str(f)))
    missing = sorted(set(replayed) - set(saved))  # the folder may add aliases (a tied lm_head)
    if missing:
        raise ValueError(f"checkpoint {step}'s policy lacks {missing[:3]}")
    diff = max(float((t - saved[k].float()).abs().max()) for k, t in replayed.items())
    return Replay(step, diff, len(replayed))
