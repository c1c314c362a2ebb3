"""The trainer's own checkpoint (`TrainerCheckpoint`, a part of `pivot.roles.trainer.Trainer`):
each rank's parameter and AdamW shards in one safetensors file, plus `trainer.json` (version,
counters, shapes, the caller's `extra`) from rank 0. A group of another size restores it too
(the training pool is re-sized at run time): each rank then reads only its own rows of every
tensor from the old ranks' files."""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from pivot.config import TrainConfig
from pivot.roles.collective_write import CollectiveWrite, injected_disk_full

if TYPE_CHECKING:  # FSDP's DTensor costs start-up time on ranks that never train (parallelize.py)
    from torch.distributed.tensor import DTensor

STATE_FILE = "trainer.json"


@dataclass(kw_only=True)
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

    def _rank_file(self, path: Path, rank: int, world: int | None = None) -> Path:
        return path / f"rank{rank:05d}-of-{world or self.world:05d}.safetensors"

    def save(
        self,
        path: str | Path,
        *,
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
        tensors, steps = {}, {}
        for name, p in self.params.items():
            tensors[f"param/{name}"] = p.to_local().detach().contiguous().cpu()
            state = self.optimizer.state.get(p, {})
            for key in ("exp_avg", "exp_avg_sq"):
                if key in state:
                    tensors[f"{key}/{name}"] = state[key].to_local().detach().contiguous().cpu()
            if "step" in state:
                steps[name] = float(state["step"])
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
        written = [self._rank_file(path, self.rank)] + (
            [path / STATE_FILE] if self.rank == 0 else []
        )
        with CollectiveWrite(path) as write:
            injected_disk_full(written[0])
            path.mkdir(parents=True, exist_ok=True)
            save_file(tensors, str(written[0]))
            if self.rank == 0:
                (path / STATE_FILE).write_text(json.dumps(meta, indent=1))
        write.agree(self.group)  # the barrier: no rank leaves before every rank wrote or failed
        return written

    def load(self, path: str | Path) -> Restored:
        """Restore what `save` wrote, by this world size or another, into the parameters and
        optimizer; returns the saved counters and `extra`. Local reads + barrier."""
        path = Path(path)
        meta_file = path / STATE_FILE
        if not meta_file.is_file():
            raise FileNotFoundError(f"checkpoint {path}: missing {STATE_FILE}")
        meta = json.loads(meta_file.read_text())
        for name, p in self.params.items():
            if tuple(meta["shapes"].get(name, ())) != tuple(p.shape):
                raise ValueError(
                    f"checkpoint {path}: tensor {name!r} has shape {meta['shapes'].get(name)}, expected {list(p.shape)}"
                )
        # (key, local tensor it fills): the moments only for parameters the optimizer had stepped
        wanted = [
            (f"{key}/{name}", p)
            for name, p in self.params.items()
            for key in ("param", "exp_avg", "exp_avg_sq")
            if key == "param" or name in meta["optimizer_steps"]
        ]
        with ExitStack() as files:
            if meta["world"] == self.world:
                fill = self._own_file(path, wanted)
            else:
                fill = self._old_rows(path, int(meta["world"]), wanted, files)
            # both helpers validate before the first copy: a bad checkpoint leaves the state as is
            with torch.no_grad():
                for name, p in self.params.items():
                    fill(f"param/{name}", p.to_local())
                    if name in meta["optimizer_steps"]:
                        state = self.optimizer.state[p]
                        state["step"] = torch.tensor(meta["optimizer_steps"][name])
                        for key in ("exp_avg", "exp_avg_sq"):
                            if key not in state:
                                state[key] = torch.zeros_like(
                                    p, memory_format=torch.preserve_format
                                )
                            fill(f"{key}/{name}", state[key].to_local())
                    else:
                        self.optimizer.state.pop(p, None)
        dist.barrier(group=self.group)
        return Restored(
            version=int(meta["version"]),
            bad_steps=int(meta["bad_steps"]),
            extra=meta["extra"],
            micro_batch_tokens=meta.get("micro_batch_tokens"),
        )

    def _own_file(
        self, path: Path, wanted: list[tuple[str, DTensor]]
    ) -> Callable[[str, torch.Tensor], None]:
        """Same world size: this rank's shards are exactly its own file, read whole."""
        file = self._rank_file(path, self.rank)
        if not file.is_file():
            raise FileNotFoundError(f"checkpoint {path}: missing {file.name}")
        tensors = load_file(str(file))
        for key, p in wanted:
            t, local = tensors.get(key), p.to_local()
            if t is None:
                raise ValueError(f"checkpoint {file}: tensor {key!r} missing")
            if t.shape != local.shape:
                raise ValueError(
                    f"checkpoint {file}: tensor {key!r} has shape {tuple(t.shape)}, "
                    f"expected {tuple(local.shape)}"
                )

        def fill(key: str, local: torch.Tensor) -> None:
            local.copy_(tensors[key])

        return fill

    def _old_rows(
        self, path: Path, old_world: int, wanted: list[tuple[str, DTensor]], files: ExitStack
    ) -> Callable[[str, torch.Tensor], None]:
        """Another world size: this rank's dim-0 rows of each tensor (where its DTensor says they
        lie) are cut out of the old ranks' files, whose rows follow one another in rank order.
        Only headers are read here and only those rows later (the whole state is over a TB at 72B)."""
        from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

        names = [self._rank_file(path, r, old_world) for r in range(old_world)]
        for file in names:
            if not file.is_file():
                raise FileNotFoundError(f"checkpoint {path}: missing {file.name}")
        old = [files.enter_context(safe_open(str(f), framework="pt")) for f in names]
        held_keys = [set(f.keys()) for f in old]  # a list per call: a set keeps the checks linear
        # key -> (old rank, first row there, last row + 1 there, first row here)
        pieces: dict[str, list[tuple[int, int, int, int]]] = {}
        for key, p in wanted:
            shape, local = tuple(p.shape), p.to_local()
            rows, offset = compute_local_shape_and_global_offset(shape, p.device_mesh, p.placements)
            if (
                not shape
                or tuple(rows) != tuple(local.shape)
                or any(offset[1:])
                or rows[1:] != shape[1:]
            ):
                raise ValueError(
                    f"checkpoint {path}: tensor {key!r} is laid out as {p.placements} "
                    f"(local {tuple(local.shape)} of {shape}); resharding reads dim-0 shards only"
                )
            start, stop, first = offset[0], offset[0] + rows[0], 0
            pieces[key] = []
            for r, f in enumerate(old):
                if key not in held_keys[r]:
                    raise ValueError(f"checkpoint {names[r]}: tensor {key!r} missing")
                held = tuple(f.get_slice(key).get_shape())
                if held[1:] != shape[1:]:
                    raise ValueError(
                        f"checkpoint {names[r]}: tensor {key!r} has shape {held}, expected rows of {shape}"
                    )
                a, b = max(start, first), min(stop, first + held[0])
                if a < b:
                    pieces[key].append((r, a - first, b - first, a - start))
                first += held[0]
            if first != shape[0] or sum(b - a for _, a, b, _ in pieces[key]) != rows[0]:
                raise ValueError(
                    f"checkpoint {path}: tensor {key!r} has {first} rows over {old_world} rank "
                    f"files, expected {shape[0]}"
                )

        def fill(key: str, local: torch.Tensor) -> None:
            for r, a, b, here in pieces[key]:
                local[here : here + b - a].copy_(old[r].get_slice(key)[a:b])

        return fill
