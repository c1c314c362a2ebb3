"""`Trainer.shift_down` on CUDA returns the blocks it frees to the driver (`torch.cuda.empty_cache`)
after every storage is freed: torch's caching allocator would otherwise keep them, and an sglang
process on the same device could not use the memory the trainer just left. On a CPU machine the
trainer is told its device is CUDA and `empty_cache` is a spy; nothing else in `shift_down`
depends on the device but the host copies' pinning, which is switched off here."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from trainer_harness import spawn, tiny_model

from pivot.config import TrainConfig
from pivot.rl.batch import TrainBatch
from pivot.roles.trainer import Trainer


def _shift_down_releases_cache(rank: int, world: int, group: dist.ProcessGroup) -> None:
    trainer = Trainer(tiny_model(), group, TrainConfig(lr=1e-2, micro_batch_tokens=16))
    trainer.train_step(
        TrainBatch([[1, 2, 3], [4, 5]], [[6, 7], [8]], [1.0, -1.0])
    )  # optimizer state exists
    storages = [st for which in ("master", "optim") for st in trainer._storages(which)]
    assert storages
    calls: list[int] = []  # bytes still held by the trainer's storages when empty_cache runs

    def spy() -> None:
        calls.append(sum(st.nbytes() for st in storages))

    real_cache, real_empty = torch.cuda.empty_cache, torch.empty

    def unpinned(*args: object, pin_memory: bool = False, **kwargs: object) -> torch.Tensor:
        return real_empty(*args, **kwargs)  # type: ignore[arg-type]  # no pinned memory without CUDA

    torch.cuda.empty_cache, torch.empty = spy, unpinned  # type: ignore[assignment]
    try:
        trainer.shift_down()  # on the CPU: nothing to release
        assert calls == []
        trainer.shift_up()
        trainer.device = torch.device("cuda")
        trainer.shift_down()
    finally:
        torch.cuda.empty_cache, torch.empty = real_cache, real_empty  # type: ignore[assignment]
    assert calls == [0], calls  # once, and after every storage was freed


@pytest.mark.slow
def test_shift_down_on_cuda_empties_the_allocator_cache() -> None:
    spawn(_shift_down_releases_cache, 1)
