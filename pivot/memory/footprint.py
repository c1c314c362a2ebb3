"""What the memory plan needs of a model: its tensors (at the configured dtype) and its shape.

From a Hugging Face folder the numbers are exact: tensor names and shapes from the safetensors
headers (read in pure Python: an 8-byte little-endian length, then a JSON header), the
attention shape from config.json. Without a folder they come from the preset's parameter count
and the simulator's architecture table (`pivot.sim.hardware.model_spec`); the hidden size is then
estimated from params ~= 12 * layers * hidden^2 and marked as an estimate.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

from pivot.gps.spec import DTYPE_BYTES, TensorSpec
from pivot.model.names import decoder_name
from pivot.model.tp_plan import split_view, tp_split
from pivot.sim.hardware import model_spec

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
_FLOAT = ("F64", "F32", "F16", "BF16")
_DEFAULT_VOCAB = 151936  # Qwen tokenizers; only used when no config.json says otherwise
_DEFAULT_POSITIONS = 32768  # Qwen2.5's config.json (7B to 72B); likewise only without a folder


@dataclass(frozen=True)
class ModelFootprint:
    """A model's tensors and the shape numbers the KV-cache and activation estimates use."""

    name: str
    source: str
    """Where the numbers come from (a folder, or 'estimated from params_b')."""
    specs: tuple[TensorSpec, ...]
    """Every tensor at the configured dtype; without a folder, one flat tensor of all parameters."""
    layers: int
    kv_layers: int
    """Layers with a KV cache (hybrid linear-attention models: the full-attention ones)."""
    kv_heads: int
    head_dim: int
    hidden: int
    intermediate: int
    vocab: int
    dtype_bytes: int
    max_positions: int = 0
    """config.json's max_position_embeddings (0: not known); a sequence is at most this long."""

    @property
    def graphable(self) -> bool:
        """Whether the embedded engine replays its decode steps from graphs: not with linear
        attention (per-sequence state) nor MoE routing (host syncs), as `ModelRunner` decides."""
        moe = any(".experts." in s.name or s.name.endswith("mlp.gate.weight") for s in self.specs)
        return self.kv_layers == self.layers and not moe

    @property
    def params(self) -> int:
        return sum(s.numel for s in self.specs)

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.specs)

    def tp_bytes(self, tp: int) -> int:
        """Bytes one rank of a TP=`tp` replica holds: split tensors 1/tp, the rest whole. The
        flat stand-in of an estimate splits entirely."""
        total = 0
        for s in self.specs:
            dim = tp_split(s.name).dim if s.name != "params" else 0
            shape = split_view(s.name, s.shape)  # fused experts: gate and up halves each split
            if dim is None or dim >= len(shape) or shape[dim] % tp:
                total += s.nbytes
            else:
                total += s.nbytes // tp
        return total

    def layer_params(self) -> int:
        """Parameters of the largest decoder layer (what FSDP all-gathers at once)."""
        per: dict[str, int] = {}
        for s in self.specs:
            parts = s.name.split(".")
            if len(parts) > 3 and parts[1] == "layers":
                per[parts[2]] = per.get(parts[2], 0) + s.numel
        if per:
            return max(per.values())
        return (self.params - 2 * self.vocab * self.hidden) // max(self.layers, 1)


def _dtype(name: str, header_dtype: str, dtype: str) -> str:
    """Floating tensors take the configured dtype (GPS and devices hold them so); others keep theirs."""
    if header_dtype in _FLOAT:
        return dtype
    return {
        "I64": "int64",
        "I32": "int32",
        "I16": "int16",
        "I8": "int8",
        "U8": "uint8",
        "BOOL": "bool",
    }[header_dtype]


def read_headers(folder: Path) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, shape, safetensors dtype) of every tensor in the folder, without reading data."""
    index = folder / INDEX
    files = (
        sorted(set(json.loads(index.read_text())["weight_map"].values()))
        if index.is_file()
        else [SINGLE]
    )
    out = []
    for file in files:
        path = folder / file
        if not path.is_file():
            raise FileNotFoundError(f"{path}: missing")
        with path.open("rb") as f:
            (size,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(size))
        for name, entry in header.items():
            if name != "__metadata__":
                out.append((name, tuple(entry["shape"]), entry["dtype"]))
    return out


def from_folder(folder: str | Path, dtype: str) -> ModelFootprint:
    """Exact footprint of a Hugging Face folder at `dtype`."""
    folder = Path(folder)
    cfg = json.loads((folder / "config.json").read_text())
    cfg = cfg.get("text_config", cfg)  # multimodal wrappers keep the decoder's numbers here
    # the decoder's tensors only (a vision tower and an MTP head are not loaded), by Pivot's names
    specs = tuple(
        TensorSpec(ours, shape, _dtype(n, dt, dtype))
        for n, shape, dt in read_headers(folder)
        if (ours := decoder_name(n)) is not None
    )
    heads = cfg["num_attention_heads"]
    layers = cfg["num_hidden_layers"]
    kinds = cfg.get("layer_types") or []
    kv_layers = sum(k == "full_attention" for k in kinds) if kinds else layers
    return ModelFootprint(
        name=folder.name,
        source=str(folder),
        specs=specs,
        layers=layers,
        kv_layers=kv_layers,
        kv_heads=cfg.get("num_key_value_heads") or heads,
        head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
        hidden=cfg["hidden_size"],
        intermediate=cfg.get("moe_intermediate_size")
        or cfg.get("intermediate_size")
        or 4 * cfg["hidden_size"],
        vocab=cfg.get("vocab_size", _DEFAULT_VOCAB),
        dtype_bytes=DTYPE_BYTES[dtype],
        max_positions=cfg.get("max_position_embeddings", 0),
    )


def from_params(path: str, params_b: float, active_params_b: float, dtype: str) -> ModelFootprint:
    """Estimated footprint from a preset's parameter count (the folder is not on this machine)."""
    arch = model_spec(path, params_b, active_params_b)
    params = int(params_b * 1e9)
    active = int(arch.active_params_b * 1e9)
    hidden = 128 * max(1, round(math.sqrt(active / (12 * arch.layers)) / 128))
    return ModelFootprint(
        name=arch.name,
        source=f"estimated from params_b={params_b} ({path or 'no folder'} not found)",
        specs=(TensorSpec("params", (params,), dtype),),
        layers=arch.layers,
        kv_layers=arch.layers,
        kv_heads=arch.kv_heads,
        head_dim=arch.head_dim,
        hidden=hidden,
        intermediate=4 * hidden,
        vocab=_DEFAULT_VOCAB,
        dtype_bytes=DTYPE_BYTES[dtype],
        max_positions=_DEFAULT_POSITIONS,
    )
