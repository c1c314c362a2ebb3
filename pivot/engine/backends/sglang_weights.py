"""Weights into and out of an in-process `sglang.Engine` 0.5.23 (GPU only; used by
`pivot.engine.backends.sglang_adapter`, whose tests drive it through the fake `sglang`).

In: a weight update is ONE session, `begin_weight_update()` .. `end_weight_update()`, because
0.5.23 refuses `update_weights_from_tensor` outside one (weight_updater.py:232-239) and refuses a
second begin while one is open (weight_updater.py:311-316). The tensors go in buckets of at most
`bucket_bytes`, each staged on `staging_device` (this bounds the staging memory). With nothing
running the prefix cache is flushed with the last bucket; with requests running, generation is
paused in place first (`paused`) and no bucket flushes, since a flush with requests in the
running batch fails the update (weight_updater.py:120-133; io_struct.py:1927-1946). Each bucket
is loaded by `load_after_inflight` (registered as sglang's custom weight loader `LOADER`), which
first waits for the forward the pause left running.
Out: `get_weights_by_name` (--log.verify-weights), which only some model classes have.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Iterator
from typing import Any

import torch

BUCKET_BYTES = 1 << 30
"""Most bytes of one `update_weights_from_tensor` call (bounds the staging memory)."""
WHOLE_WEIGHTS_BY_NAME = frozenset({"LlamaForCausalLM", "MistralForCausalLM"})
"""Architectures Pivot serves whose sglang 0.5.23 model class has `get_weights_by_name`
(models/llama.py:819; Qwen2/Qwen3/Qwen3-MoE/GLM-4 have none and answer None,
weight_exporter.py:169-188). Even these return the local TP shard of q/k/v, gate/up and the
embedding (llama.py:837-870), so only TP 1 gives whole tensors."""
LOADER = "pivot.engine.backends.sglang_weights.load_after_inflight"
"""What every bucket names as its `load_format`, and the engine registers as its
`custom_weight_loader` (a load format sglang does not know is refused: model_runner_components/
weight_updater.py:374-380); sglang imports it in each scheduler process by this path
(utils/common.py:4339-4349)."""


@contextlib.contextmanager
def paused(engine: Any, loop: asyncio.AbstractEventLoop) -> Iterator[None]:
    """Generation paused in place: running requests stay in the scheduler with their K/V and
    continue after, with whatever weights were loaded meanwhile (scheduler.py:5817-5830). While
    paused, the weight calls skip the model-update lock that every running stream holds a reader
    side of (tokenizer_control_mixin.py:470-483, 580-586), and new requests wait for the
    continue (tokenizer_manager.py:938-939). sglang's offline Engine has no pause method: its
    tokenizer manager's, run on the engine's loop (tokenizer_manager.py:2267-2286)."""
    from sglang.srt.managers.io_struct import (  # GPU only
        ContinueGenerationReqInput,
        PauseGenerationReqInput,
    )

    pause = PauseGenerationReqInput(mode="in_place")
    loop.run_until_complete(engine.tokenizer_manager.pause_generation(pause))
    try:
        yield
    finally:
        resume = ContinueGenerationReqInput()
        loop.run_until_complete(engine.tokenizer_manager.continue_generation(resume))


def load_after_inflight(model: Any, named_tensors: list[tuple[str, torch.Tensor]]) -> None:
    """sglang's custom loader for one bucket, run in each scheduler process on its own device
    (model_runner_components/weight_updater.py:374-376): wait until the device has finished
    every kernel already launched, then load as sglang's default does (`model.load_weights`,
    :377-378).
    Why the wait: an in-place pause returns at once, leaving the overlap scheduler's last batch
    running on `forward_stream` (managers/scheduler.py:5821-5831; the paused loop launches
    nothing more, :2079-2081), while the weight copies run on `schedule_stream`, the stream the
    whole event loop runs under (:2008). The one fence between them waits for that batch's
    metadata reads (:2012-2023), which end before its layers do for a decode replay (the
    default `shared_read_ends` of a decode batch is IN_REPLAY, layers/attention/
    base_attn_backend.py:195-199; decode_cuda_graph_runner.py:2008-2017): without the wait, that
    batch's token could be made by a mix of old and new layers. Forwards launched after the
    update wait for `schedule_stream` (scheduler.py:4671-4672), so they see the new weights."""
    if torch.cuda.is_available():
        torch.cuda.synchronize()  # the scheduler's current device (its TP rank's GPU)
    model.load_weights(named_tensors)


def push_weights(
    engine: Any,
    tensors: dict[str, torch.Tensor],
    bucket_bytes: int,
    staging_device: str,
    flush_cache: bool = True,
) -> None:
    """Every tensor of `tensors` into `engine` inside one weight-update session, bucket by
    bucket, the prefix cache flushed with the last one when `flush_cache`; the session is
    closed even when a bucket is refused."""
    groups = buckets(list(tensors.items()), bucket_bytes)
    check_reply("begin_weight_update", engine.begin_weight_update())
    try:
        for i, bucket in enumerate(groups):
            staged = [(n, t.to(staging_device, non_blocking=True)) for n, t in bucket]
            check_reply(
                "update_weights_from_tensor",
                engine.update_weights_from_tensor(
                    staged, load_format=LOADER, flush_cache=flush_cache and i == len(groups) - 1
                ),
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
