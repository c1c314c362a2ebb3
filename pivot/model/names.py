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

LANGUAGE_PREFIX = "model.language_model."
SKIPPED_PREFIXES = ("model.visual.", "mtp.", "model.mtp.")


def decoder_name(name: str) -> str | None:
    """Pivot's name for checkpoint tensor `name`, or None when the decoder does not use it."""
    if name.startswith(SKIPPED_PREFIXES):
        return None
    if name.startswith(LANGUAGE_PREFIX):
        return "model." + name.removeprefix(LANGUAGE_PREFIX)
    return name
