"""Checkpoint tensor names -> the decoder's names, in pure Python (the memory plan reads headers
without torch).

Vision-language folders (Qwen3.5 on the hub: `Qwen3_5MoeForConditionalGeneration`) nest the
language model under `model.language_model.`; their vision tower (`model.visual.*`) and
multi-token-prediction head (`mtp.*`: `mtp.fc`, `mtp.pre_fc_norm_embedding`,
`mtp.pre_fc_norm_hidden`, `mtp.norm`, `mtp.layers.0.*`) are not part of the decoder Pivot
serves, and are skipped on purpose (vLLM's `qwen3_5.py` `load_weights` skips `mtp.` too when
not drafting).
"""

from __future__ import annotations

import json
from pathlib import Path

LANGUAGE_PREFIX = "model.language_model."
SKIPPED_PREFIXES = ("model.visual.", "mtp.", "model.mtp.")


def decoder_name(name: str) -> str | None:
    """Pivot's name for checkpoint tensor `name`, or None when the decoder does not use it."""
    if name.startswith(SKIPPED_PREFIXES):
        return None
    if name.startswith(LANGUAGE_PREFIX):
        return "model." + name.removeprefix(LANGUAGE_PREFIX)
    return name


_FUSED_SUFFIX = ".mlp.experts.gate_up_proj"


def has_fused_experts(folder: Path) -> bool:
    """Whether the folder's tensors name fused experts, from the index or the single file's
    header (names only, no tensor data). A folder without weights reads as per-expert."""
    index, single = folder / "model.safetensors.index.json", folder / "model.safetensors"
    if index.is_file():
        names = json.loads(index.read_text()).get("weight_map", {})
    elif single.is_file():
        with single.open("rb") as f:
            size = int.from_bytes(f.read(8), "little")
            names = json.loads(f.read(size)) if 0 < size < 1 << 30 else {}
    else:
        return False
    return any(n.endswith(_FUSED_SUFFIX) for n in names)
