"""Read boxes of safetensors tensors: a rank that keeps a slice of a tensor reads only that slice.

`safe_open(...).get_slice(name)[box]` reads just the requested bytes from the (memory-mapped)
file; the tensor list comes from `model.safetensors.index.json` when the checkpoint is sharded.
Boxes are [start, stop) per dimension, the form `pivot.gps.layout` pieces use.
"""
from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path

import torch
from safetensors import safe_open

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"

Box = tuple[tuple[int, int], ...]


def _files(folder: Path, names: list[str]) -> dict[Path, list[str]]:
    """File -> the wanted tensors it holds."""
    index = folder / INDEX
    if index.is_file():
        weight_map: dict[str, str] = json.loads(index.read_text())["weight_map"]
        missing = [n for n in names if n not in weight_map]
        if missing:
            raise ValueError(f"{index}: tensor {missing[0]!r} is not listed ({len(missing)} missing)")
        out: dict[Path, list[str]] = {}
        for name in names:
            out.setdefault(folder / weight_map[name], []).append(name)
        return out
    if not (folder / SINGLE).is_file():
        raise FileNotFoundError(f"{folder}: no {SINGLE} and no {INDEX}")
    return {folder / SINGLE: list(names)}


def iter_boxes(folder: str | Path, boxes: Mapping[str, Box], dtype: torch.dtype | None = None,
               device: torch.device | str = "cpu") -> Iterator[tuple[str, torch.Tensor]]:
    """(name, `boxes[name]` of that tensor) one at a time, cast to `dtype` (None: as stored), on
    `device`; a consumer that copies each into place holds one slice at a time."""
    folder = Path(folder)
    for file, names in _files(folder, list(boxes)).items():
        if not file.is_file():
            raise FileNotFoundError(f"{file}: listed in {INDEX} but missing")
        with safe_open(str(file), framework="pt") as f:
            present = set(f.keys())
            for name in names:
                if name not in present:
                    raise ValueError(f"{file}: tensor {name!r} is not in the file")
                sliced = f.get_slice(name)
                shape, box = tuple(sliced.get_shape()), boxes[name]
                if len(box) != len(shape) or any(not 0 <= a <= b <= n for (a, b), n in zip(box, shape)):
                    raise ValueError(f"{file}: tensor {name!r} of shape {shape} has no box {box}")
                t = sliced[tuple(slice(a, b) for a, b in box)] if box else f.get_tensor(name)
                yield name, t.to(device=device, dtype=dtype or t.dtype)


def read_boxes(folder: str | Path, boxes: Mapping[str, Box], dtype: torch.dtype | None = None,
               device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """Every `boxes[name]` at once (see `iter_boxes`)."""
    return dict(iter_boxes(folder, boxes, dtype, device))
