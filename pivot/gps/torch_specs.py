"""Torch side of tensor specs: dtype names and specs from a state_dict."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path

import torch

from pivot.gps.spec import TensorSpec

TORCH_DTYPES: dict[str, torch.dtype] = {
    "float64": torch.float64,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
}
DTYPE_NAMES: dict[torch.dtype, str] = {v: k for k, v in TORCH_DTYPES.items()}


def specs_from_state_dict(state: Mapping[str, torch.Tensor]) -> list[TensorSpec]:
    """TensorSpecs in the state_dict's order."""
    return _specs((name, tuple(t.shape), t.dtype) for name, t in state.items())


def specs_from_checkpoint(path: str | Path) -> list[TensorSpec]:
    """TensorSpecs of a HF checkpoint folder from its safetensors headers, in file order (the
    order `pivot.model.load_state_dict` returns), without reading any tensor data."""
    from pivot.model.hf_folder import tensor_headers

    return _specs((name, shape, dtype) for name, (shape, dtype) in tensor_headers(path).items())


def _specs(entries: Iterable[tuple[str, tuple[int, ...], torch.dtype]]) -> list[TensorSpec]:
    out = []
    for name, shape, dtype in entries:
        if dtype not in DTYPE_NAMES:
            raise ValueError(f"tensor {name!r}: unsupported dtype {dtype}")
        out.append(TensorSpec(name, shape, DTYPE_NAMES[dtype]))
    return out
