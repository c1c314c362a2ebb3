"""The trainer's own checkpoint (`TrainerCheckpoint`, a part of `pivot.roles.trainer.Trainer`):
each rank's parameter and AdamW shards in one safetensors file, plus `trainer.json` (version,
counters, shapes, the caller's `extra`) from rank 0. Restoring needs the same training world size."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from safetensors.torch import load_file, save_file

from pivot.config import TrainConfig

if TYPE_CHECKING:  # FSDP's DTensor costs start-up time on ranks that never train (parallelize.py)
    from torch.distributed.tensor import DTensor

STATE_FILE = "trainer.json"


@dataclass
class Restored:
    """What `TrainerCheckpoint.load` hands back: the trainer's counters and the caller's `extra`."""

    version: int
    bad_steps: int
    extra: dict[str, Any]
    micro_batch_tokens: int | None = None
    """The budget the run had split down to (`MicroBatchGuard`); None in older checkpoints."""


class TrainerCheckpoint:
    """Save/load of one training rank's sharded parameters and their AdamW state. It holds the
    live `params` and `optimizer` it writes and restores in place; the trainer's counters travel
    as explicit inputs (`save`) and outputs (`load`). Both are collective over `group`."""

    def __init__(
        self,
        params: dict[str, DTensor],
        optimizer: torch.optim.Optimizer,
        group: dist.ProcessGroup,
    ) -> None:
        self.params, self.optimizer, self.group = params, optimizer, group
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)

    def _rank_file(self, path: Path, rank: int) -> Path:
        return path / f"rank{rank:05d}-of-{self.world:05d}.safetensors"

    def save(
        self,
        path: str | Path,
        version: int,
        bad_steps: int,
        config: TrainConfig,
        extra: dict[str, Any] | None = None,
        micro_batch_tokens: int | None = None,
    ) -> list[Path]:
        """Each rank writes its parameter and AdamW shards; rank 0 writes `trainer.json`
        (version, counters, shapes, JSON-able `extra` such as the data cursor). Collective;
        returns the files this rank wrote."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        tensors, steps = {}, {}
        for name, p in self.params.items():
            tensors[f"param/{name}"] = p.to_local().detach().contiguous().cpu()
            state = self.optimizer.state.get(p, {})
            for key in ("exp_avg", "exp_avg_sq"):
                if key in state:
                    tensors[f"{key}/{name}"] = state[key].to_local().detach().contiguous().cpu()
            if "step" in state:
                steps[name] = float(state["step"])
        written = [self._rank_file(path, self.rank)]
        save_file(tensors, str(written[0]))
        if self.rank == 0:
            meta = {
                "world": self.world,
                "version": version,
                "bad_steps": bad_steps,
                "micro_batch_tokens": micro_batch_tokens or config.micro_batch_tokens,
                "optimizer_steps": steps,
                "shapes": {n: list(p.shape) for n, p in self.params.items()},
                "config": asdict(config),
                "extra": extra or {},
            }
            (path / STATE_FILE).write_text(json.dumps(meta, indent=1))
            written.append(path / STATE_FILE)
        dist.barrier(group=self.group)
        return written

    def load(self, path: str | Path) -> Restored:
        """Restore what `save` wrote (same world size) into the parameters and optimizer; returns
        the saved counters and `extra`. Local reads + barrier."""
        path = Path(path)
        meta_file = path / STATE_FILE
        if not meta_file.is_file():
            raise FileNotFoundError(f"checkpoint {path}: missing {STATE_FILE}")
        meta = json.loads(meta_file.read_text())
        if meta["world"] != self.world:
            raise ValueError(
                f"checkpoint {path} was saved by {meta['world']} training ranks, this group has {self.world}"
            )
        file = self._rank_file(path, self.rank)
        if not file.is_file():
            raise FileNotFoundError(f"checkpoint {path}: missing {file.name}")
        tensors = load_file(str(file))
        for name, p in self.params.items():
            if tuple(meta["shapes"].get(name, ())) != tuple(p.shape):
                raise ValueError(
                    f"checkpoint {path}: tensor {name!r} has shape {meta['shapes'].get(name)}, expected {list(p.shape)}"
                )
            for key in ("param", "exp_avg", "exp_avg_sq"):
                if key != "param" and name not in meta["optimizer_steps"]:
                    continue
                t = tensors.get(f"{key}/{name}")
                local = p.to_local()
                if t is None:
                    raise ValueError(f"checkpoint {file}: tensor {key}/{name!r} missing")
                if t.shape != local.shape:
                    raise ValueError(
                        f"checkpoint {file}: tensor {key}/{name!r} has shape {tuple(t.shape)}, "
                        f"expected {tuple(local.shape)}"
                    )
        with torch.no_grad():
            for name, p in self.params.items():
                p.to_local().copy_(tensors[f"param/{name}"])
                if name in meta["optimizer_steps"]:
                    state = self.optimizer.state[p]
                    state["step"] = torch.tensor(meta["optimizer_steps"][name])
                    for key in ("exp_avg", "exp_avg_sq"):
                        if key not in state:
                            state[key] = torch.zeros_like(p, memory_format=torch.preserve_format)
                        state[key].to_local().copy_(tensors[f"{key}/{name}"])
                else:
                    self.optimizer.state.pop(p, None)
        dist.barrier(group=self.group)
        return Restored(
            int(meta["version"]),
            int(meta["bad_steps"]),
            meta["extra"],
            meta.get("micro_batch_tokens"),
        )
