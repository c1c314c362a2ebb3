"""RoPE parameters of a config.json: `rope_parameters` (the newer spelling) or `rope_scaling`."""

from __future__ import annotations

from typing import Any

# rope types whose cos/sin Pivot computes: the default one. Qwen3.5's multimodal RoPE
# (`mrope_section`, `mrope_interleaved`) gives text tokens the same position on all three axes,
# so for text it is the default RoPE (transformers 5.24
# `Qwen3_5MoeTextRotaryEmbedding.forward` expands one position id to 3 identical rows).
_ROPE_KEYS = {
    "rope_type",
    "type",
    "rope_theta",
    "partial_rotary_factor",
    "mrope_section",
    "mrope_interleaved",
}


def read_rope(cfg: dict[str, Any], source: str) -> tuple[dict[str, Any], str]:
    """The RoPE parameters and the field they came from (`rope_parameters`, the newer spelling,
    else `rope_scaling`); an unsupported type or key is one line naming the field."""
    field = "rope_parameters" if cfg.get("rope_parameters") else "rope_scaling"
    rope = cfg.get(field) or {}
    if not isinstance(rope, dict):
        raise ValueError(f"{source}: {field}={rope!r} is not an object")
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type not in ("default", None):
        raise ValueError(
            f"{source}: {field}.rope_type={rope_type!r} is not supported (only 'default' RoPE)"
        )
    unknown = sorted(set(rope) - _ROPE_KEYS)
    if unknown:
        raise ValueError(
            f"{source}: {field}.{unknown[0]} is not supported (only default RoPE: {', '.join(sorted(_ROPE_KEYS))})"
        )
    return rope, field
