"""A model's tensor list in pure Python: names, shapes and dtypes, no torch.

GPS plans over these specs; the torch side builds them from a state_dict (see torch_specs.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

DTYPE_BYTES: dict[str, int] = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
}


@dataclass(frozen=True)
class TensorSpec:
    """One named tensor of a model."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self) -> None:
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"tensor {self.name!r}: unknown dtype {self.dtype!r}")
        if any((not isinstance(d, int)) or d < 0 for d in self.shape):
            raise ValueError(f"tensor {self.name!r}: bad shape {self.shape!r}")

    @property
    def itemsize(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize


def model_bytes(specs: tuple[TensorSpec, ...] | list[TensorSpec]) -> int:
    return sum(s.nbytes for s in specs)


def qwen2_specs(
    layers: int,
    hidden: int,
    intermediate: int,
    heads: int,
    kv_heads: int,
    head_dim: int,
    vocab: int,
    dtype: str = "bfloat16",
    tie_embeddings: bool = False,
) -> list[TensorSpec]:
    """The Hugging Face tensor list of a Qwen2-family decoder (q/k/v biases, no q/k norms)."""
    q, kv = heads * head_dim, kv_heads * head_dim
    specs = [TensorSpec("model.embed_tokens.weight", (vocab, hidden), dtype)]
    for i in range(layers):
        p = f"model.layers.{i}."
        specs += [
            TensorSpec(p + "input_layernorm.weight", (hidden,), dtype),
            TensorSpec(p + "self_attn.q_proj.weight", (q, hidden), dtype),
            TensorSpec(p + "self_attn.q_proj.bias", (q,), dtype),
            TensorSpec(p + "self_attn.k_proj.weight", (kv, hidden), dtype),
            TensorSpec(p + "self_attn.k_proj.bias", (kv,), dtype),
            TensorSpec(p + "self_attn.v_proj.weight", (kv, hidden), dtype),
            TensorSpec(p + "self_attn.v_proj.bias", (kv,), dtype),
            TensorSpec(p + "self_attn.o_proj.weight", (hidden, q), dtype),
            TensorSpec(p + "post_attention_layernorm.weight", (hidden,), dtype),
            TensorSpec(p + "mlp.gate_proj.weight", (intermediate, hidden), dtype),
            TensorSpec(p + "mlp.up_proj.weight", (intermediate, hidden), dtype),
            TensorSpec(p + "mlp.down_proj.weight", (hidden, intermediate), dtype),
        ]
    specs.append(TensorSpec("model.norm.weight", (hidden,), dtype))
    if not tie_embeddings:
        specs.append(TensorSpec("lm_head.weight", (vocab, hidden), dtype))
    return specs


def qwen25_72b_specs() -> list[TensorSpec]:
    """Qwen2.5-72B's tensor list (about 72.7e9 parameters), for planning benchmarks."""
    return qwen2_specs(
        layers=80, hidden=8192, intermediate=29568, heads=64, kv_heads=8, head_dim=128, vocab=152064
    )
