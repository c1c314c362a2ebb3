"""Weights into and out of an in-process `sglang.Engine` 0.5.23 (GPU only; used by
`pivot.engine.sglang_adapter`, whose tests drive it through the fake `sglang`).

In: a weight update is ONE session, `begin_weight_update()` .. `end_weight_update()`, because
0.5.23 refuses `update_weights_from_tensor` outside one (weight_updater.py:232-239) and refuses a
second begin while one is open (weight_updater.py:311-316). The tensors go in buckets of at most
`bucket_bytes`, each staged on `staging_device` (this bounds the staging memory); the prefix
cache is flushed with the last bucket only. The caller makes sure nothing runs first (a running
stream holds the update, and a flush on a busy scheduler fails: weight_updater.py:120-133).
Out: `get_weights_by_name` (--log.verify-weights), which only some model classes have.
"""

from __future__ import annotations

import math
from typing import Any

import torch

BUCKET_BYTES = 1 << 30
"""Most bytes of one `update_weights_from_tensor` call (bounds the staging memory)."""
WHOLE_WEIGHTS_BY_NAME = frozenset({"LlamaForCausalLM", "MistralForCausalLM"})
"""Architectures Pivot serves whose sglang 0.5.23 model class has `get_weights_by_name`
(models/llama.py:819; Qwen2/Qwen3/Qwen3-MoE/GLM-4 have none and answer None,
weight_exporter.py:169-188). Even these return the local TP shard of q/k/v, gate/up and the
embedding (llama.py:837-870), so only TP 1 gives whole tensors."""


def push_weights(
    engine: Any, tensors: dict[str, torch.Tensor], bucket_bytes: int, staging_device: str
) -> None:
    """Every tensor of `tensors` into `engine` inside one weight-update session, bucket by
    bucket; the session is closed even when a bucket is refused."""
    groups = buckets(list(tensors.items()), bucket_bytes)
    check_reply("begin_weight_update", engine.begin_weight_update())
    try:
        for i, bucket in enumerate(groups):
            staged = [(n, t.to(staging_device, non_blocking=True)) for n, t in bucket]
            check_reply(
                "update_weights_from_tensor",
                engine.update_weights_from_tensor(staged, flush_cache=i == len(groups) - 1),
            )
    finally:  # an open session would refuse every later begin_weight_update (weight_updater.py:311-316)
        ended = engine.end_weight_update()
    check_reply("end_weight_update", ended)


def whole_weights(
    engine: Any,
    full_shapes: dict[str, tuple[int, ...]],
    architectures: tuple[str, ...],
    tp_size: int,
) -> dict[str, torch.Tensor]:
    """Every weight of `full_shapes` as sglang holds it now, whole and fp32; refused (ValueError)
    where sglang cannot answer whole tensors (see `WHOLE_WEIGHTS_BY_NAME`)."""
    if tp_size != 1 or not set(architectures) & WHOLE_WEIGHTS_BY_NAME:
        raise ValueError(
            f"sglang 0.5.23 cannot return whole weights of {'/'.join(architectures) or 'this model'} at TP "
            f"{tp_size} (get_weights_by_name: {', '.join(sorted(WHOLE_WEIGHTS_BY_NAME))} at TP 1 only)"
        )
    out = {}
    for name, shape in full_shapes.items():
        rows = shape[0] if shape else 1
        got = engine.get_weights_by_name(name, truncate_size=rows)
        if got is None:  # sglang logs the reason and answers None (weight_exporter.py:178-188)
            raise ValueError(f"sglang returned no weights for {name!r} (see sglang's log)")
        t = torch.as_tensor(got, dtype=torch.float32)
        if t.numel() != math.prod(shape):
            raise ValueError(
                f"sglang returned {t.numel()} values for {name!r}, expected shape {shape}"
            )
        out[name] = t.reshape(shape)
    return out


def check_reply(call: str, reply: Any) -> None:
    """sglang 0.5.23's weight calls answer `(success, message)` (tokenizer_control_mixin.py:485-586,
    communicator.py:106-110); anything else, or success False, is an error."""
    if not (isinstance(reply, tuple) and len(reply) == 2 and isinstance(reply[0], bool)):
        raise ValueError(
            f"{call}: unexpected reply from sglang {reply!r} (expected (success, message))"
        )
    if not reply[0]:
        raise ValueError(f"{call}: sglang refused: {reply[1]}")


def buckets(
    pairs: list[tuple[str, torch.Tensor]], limit: int
) -> list[list[tuple[str, torch.Tensor]]]:
    """Consecutive groups of at most `limit` bytes (a larger tensor goes alone)."""
    out: list[list[tuple[str, torch.Tensor]]] = []
    size = limit
    for name, t in pairs:
        n = t.numel() * t.element_size()
        if size + n > limit:
            out.append([])
            size = 0
        out[-1].append((name, t))
        size += n
    return out
