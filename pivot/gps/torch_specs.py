"""Torch side of tensor specs: dtype names and specs from a state_dict."""
from __future__ import annotations

from typing import Mapping

import torch

from pivot.gps.spec import TensorSpec

TORCH_DTYPES: dict[str, torch.dtype] = {
    "float64": torch.float64, "float32": torch.float32, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "int64": torch.int64, "int32": torch.int32, "int16": torch.int16,
    "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool,
}
DTYPE_NAMES: dict[torch.dtype, str] = {v: k for k, v in TORCH_DTYPES.items()}


def specs_from_state_dict(state: Mapping[str, torch.Tensor]) -> list[TensorSpec]:
    """TensorSpecs in the state_dict's order."""
    out = []
    for name, t in state.items():
        if t.dtype not in DTYPE_NAMES:
            raise ValueError(f"tensor {name!r}: unsupported dtype {t.dtype}")
        out.append(TensorSpec(name, tuple(t.shape), DTYPE_NAMES[t.dtype]))
    return out
