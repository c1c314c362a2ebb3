"""Read boxes of safetensors tensors: a rank that keeps a slice of a tensor reads only that slice.

`safe_open(...).get_slice(name)[box]` reads just the requested bytes from the (memory-mapped)
file; the tensor list comes from `model.safetensors.index.json` when the checkpoint is sharded.
Boxes are [start, stop) per dimension, the form `pivot.gps.layout` pieces use, and tensors are
named as the decoder names them (`pivot.model.names`: a Qwen3.5 folder's
`model.language_model.` prefix is the checkpoint's business). A box of a fused experts'
gate_up_proj may be given in its split view [E, 2, I, H] (`tp_plan.split_view`): a TP rank's
share is then read as one slice of each half, never the whole tensor.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch
from safetensors import safe_open

from pivot.model.names import decoder_name
from pivot.model.tp_plan import merge_view, shard_range, split_view, tp_split

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"

Box = tuple[tuple[int, int], ...]


def _stored_names(folder: Path) -> dict[str, tuple[Path, str]]:
    """Decoder name -> (file, the name stored in it)."""
    index = folder / INDEX
    if index.is_file():
        weight_map: dict[str, str] = json.loads(index.read_text())["weight_map"]
        return {
            ours: (folder / file, name)
            for name, file in weight_map.items()
            if (ours := decoder_name(name)) is not None
        }
    if not (folder / SINGLE).is_file():
        raise FileNotFoundError(f"{folder}: no {SINGLE} and no {INDEX}")
    with safe_open(str(folder / SINGLE), framework="pt") as f:
        return {
            ours: (folder / SINGLE, name)
            for name in f.keys()
            if (ours := decoder_name(name)) is not None
        }


def _files(folder: Path, names: list[str]) -> dict[Path, list[tuple[str, str]]]:
    """File -> (decoder name, stored name) of the wanted tensors it holds."""
    stored = _stored_names(folder)
    missing = [n for n in names if n not in stored]
    if missing:
        where = folder / INDEX if (folder / INDEX).is_file() else folder / SINGLE
        raise ValueError(f"{where}: tensor {missing[0]!r} is not listed ({len(missing)} missing)")
    out: dict[Path, list[tuple[str, str]]] = {}
    for name in names:
        file, inner = stored[name]
        out.setdefault(file, []).append((name, inner))
    return out


def _read(sliced, name: str, shape: tuple[int, ...], box: Box) -> torch.Tensor:
    """Box `box` of a stored tensor of `shape`, the box given in the shape or its split view."""
    view = split_view(name, shape)
    if len(box) == len(view) != len(shape):  # one slice per half of a fused gate_up_proj
        (e0, e1), (j0, j1), (a, b), (h0, h1) = box
        half = view[2]
        return torch.stack(
            [sliced[e0:e1, j * half + a : j * half + b, h0:h1] for j in range(j0, j1)], dim=1
        )
    return sliced[tuple(slice(a, b) for a, b in box)]


def iter_boxes(
    folder: str | Path,
    boxes: Mapping[str, Box],
    dtype: torch.dtype | None = None,
    device: torch.device | str = "cpu",
) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, `boxes[name]` of that tensor) one at a time, cast to `dtype` (None: as stored), on
    `device`; a consumer that copies each into place holds one slice at a time."""
    folder = Path(folder)
    for file, names in _files(folder, list(boxes)).items():
        if not file.is_file():
            raise FileNotFoundError(f"{file}: listed in {INDEX} but missing")
        with safe_open(str(file), framework="pt") as f:
            present = set(f.keys())
            for name, inner in names:
                if inner not in present:
                    raise ValueError(f"{file}: tensor {inner!r} is not in the file")
                sliced = f.get_slice(inner)
                shape, box = tuple(sliced.get_shape()), boxes[name]
                view = split_view(name, shape)
                bounds = view if len(box) == len(view) else shape
                if len(box) != len(bounds) or any(
                    not 0 <= a <= b <= n for (a, b), n in zip(box, bounds)
                ):
                    raise ValueError(f"{file}: tensor {name!r} of shape {shape} has no box {box}")
                t = _read(sliced, name, shape, box) if box else f.get_tensor(inner)
                yield name, t.to(device=device, dtype=dtype or t.dtype)


def read_boxes(
    folder: str | Path,
    boxes: Mapping[str, Box],
    dtype: torch.dtype | None = None,
    device: torch.device | str = "cpu",
) -> dict[str, torch.Tensor]:
    """Every `boxes[name]` at once (see `iter_boxes`)."""
    return dict(iter_boxes(folder, boxes, dtype, device))


def tp_box(name: str, shape: tuple[int, ...], rank: int, world: int) -> Box:
    """TP rank `rank`'s box of tensor `name` (full `shape`), in its split view (`tp_plan`)."""
    view = split_view(name, shape)
    dim = tp_split(name).dim
    if dim is None or dim >= len(view) or world == 1:
        return tuple((0, n) for n in view)
    lo, hi = shard_range(view[dim], rank, world)
    return tuple((lo, hi) if d == dim else (0, n) for d, n in enumerate(view))


def iter_tp_shards(
    folder: str | Path,
    shapes: Mapping[str, tuple[int, ...]],
    rank: int,
    world: int,
    dtype: torch.dtype | None = None,
    device: torch.device | str = "cpu",
) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, this TP rank's shard in the model's shape) for tensors of full `shapes`, reading only
    the rank's bytes. Tensors the engine cuts itself (`pivot.engine.tp.fused_sections`: GLM-4's
    gate_up_proj, the linear attention's q|k|v) are split by the TP plan as replicated: whole."""
    boxes = {n: tp_box(n, tuple(s), rank, world) for n, s in shapes.items()}
    for name, t in iter_boxes(folder, boxes, dtype, device):
        yield name, t.reshape(merge_view(name, tuple(t.shape)))
