"""The trainer's own collectives carry tensors on the trainer's device: an NCCL-only group (the
GPU check's FSDP test, the gpu-marked trainer test) has no backend for CPU tensors. On a CPU
machine the trainer's device is the CPU, so this checks the rule, not NCCL itself (that is
tests/roles/test_trainer.py::test_cuda_bf16_step_and_shift and `tools/gpu_checks.py train`)."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from trainer_harness import spawn, tiny_model

import pivot.roles.trainer as trainer_module
from pivot.config import TrainConfig
from pivot.rl.batch import TrainBatch
from pivot.roles.trainer import Trainer


def _collectives_on_the_trainer_device(rank: int, world: int, group: dist.ProcessGroup) -> None:
    trainer = Trainer(tiny_model(), group, TrainConfig(lr=1e-2, micro_batch_tokens=16))
    seen: list[torch.device] = []
    real = dist.all_reduce

    def spy(tensor: torch.Tensor, *args: object, **kwargs: object) -> object:
        seen.append(tensor.device)
        return real(tensor, *args, **kwargs)

    trainer_module.dist.all_reduce = spy  # the module's `dist` is torch.distributed: restored below
    try:
        trainer.device = torch.device("cpu")
        m = trainer.train_step(TrainBatch([[1, 2, 3], [4, 5]], [[6, 7], [8]], [1.0, -1.0]))
    finally:
        trainer_module.dist.all_reduce = real
    assert seen and all(d == trainer.device for d in seen), seen
    assert m.tokens == 3


@pytest.mark.slow
def test_train_step_reduces_on_the_trainer_device() -> None:
    spawn(_collectives_on_the_trainer_device, 1)
