"""The training role as the worker sees it: a `Trainer` created on the first shift up, then
shifted down (optimizer state and fp32 master offloaded to host) and up (restored; parameters
checked against the GPS Read) as the planner moves the training pool. `TrainingRoleLike` is what
the worker loop calls of it: `TrainingRole` itself, or a device backend's wrapper around it
(`pivot.runtime.job.backend.DeviceBackend.install`)."""

from __future__ import annotations

import threading
import time
from dataclasses import asdict
from pathlib import Path
from typing import Protocol

import torch
import torch.distributed as dist

from pivot.config import ModelConfig, TrainConfig
from pivot.model import CausalLM, ModelArgs
from pivot.model.meta_init import params_on_meta
from pivot.rl.batch import TrainBatch
from pivot.roles.trainer import Trainer


class TrainingRoleLike(Protocol):
    """What the worker loop calls of the training role (`TrainingRole` says what each does)."""

    @property
    def needs_weights(self) -> bool: ...

    @property
    def version(self) -> int: ...

    def prewarm(self) -> None: ...

    def join(self, group: dist.ProcessGroup) -> None: ...

    def resize(self, checkpoint: Path | None) -> None: ...

    def shift_up(self, shards: dict[str, torch.Tensor] | None) -> dict[str, float]: ...

    def shift_down(self) -> dict[str, float]: ...

    def train_step(self, batch: TrainBatch) -> dict[str, float]: ...

    def shards(self) -> dict[str, torch.Tensor]: ...

    def save(self, path: str) -> list[Path]: ...


class TrainingRole:
    def __init__(
        self,
        *,
        args: ModelArgs,
        group: dist.ProcessGroup | None,
        train: TrainConfig,
        model: ModelConfig,
        device: str,
        temperature: float,
        policy: Path | None,
        resume_from: Path | None = None,
    ) -> None:
        """`group`: the training slot's (None on a rank outside it); `model`: the dtype the
        trainer computes in (FSDP2 mixed precision below fp32) and the kernels of its layers
        (the inference roles' too); `temperature`: the rollout's, whose log-probs the trainer's
        are compared with; `policy`: the initial policy's folder, the KL loss's reference
        (train.kl_coef > 0), whose tokenizer, chat template and generation files every exported
        policy carries; `resume_from`: the checkpoint the first shift up loads."""
        self.args, self.group, self.cfg, self.device = args, group, train, device
        self.temperature = temperature
        self.attention, self.linear = model.attention, model.linear
        self.compute_dtype = getattr(torch, model.dtype)
        self.policy, self.resume_from = policy, resume_from
        self.trainer: Trainer | None = None
        self._prewarm: threading.Thread | None = None

    def prewarm(self) -> None:
        """On a rank of the training pool, import what the first shift up needs on a background
        thread: FSDP, and torch._dynamo, which the first `fully_shard` imports through
        `torch._disable_dynamo` (0.7 + 1.2 CPU-s; 2.4 s of the first step's critical path beside
        a busy process). The worker calls it once its first engine is up, off the start-up rush."""
        if self.group is None or self._prewarm is not None:
            return
        self._prewarm = threading.Thread(target=_import_fsdp, name="pivot-prewarm", daemon=True)
        self._prewarm.start()

    def resize(self, checkpoint: Path | None) -> None:
        """The training slot moved (the trainer is down): drop this rank's trainer and its group;
        a rank of the new slot builds one on its next shift up (`join` gives it the group), from
        `checkpoint` when the step boundary wrote one, else as a first shift up would."""
        self.trainer, self.group, self._prewarm = None, None, None
        if checkpoint is not None:
            self.resume_from = checkpoint

    def join(self, group: dist.ProcessGroup) -> None:
        """The training slot's group, before a shift up (the slot may have moved since start)."""
        self.group = group

    @property
    def needs_weights(self) -> bool:
        """Whether the next shift up needs the GPS Read: only the first (it builds the trainer),
        and not after a restart, whose checkpoint holds the exact fp32 master the trainer loads
        (a GPS copy read first would only be overwritten); later ones restore the master kept
        on host."""
        return self.trainer is None and self.resume_from is None

    @property
    def version(self) -> int:
        """The policy version the trainer holds (its steps taken)."""
        return self.trainer.version if self.trainer is not None else -1

    def shift_up(self, shards: dict[str, torch.Tensor] | None) -> dict[str, float]:
        t0 = time.perf_counter()
        if self._prewarm is not None:
            self._prewarm.join()  # the import lock would serialise it anyway; this says so
        if self.trainer is None:
            with torch.device(self.device), params_on_meta():  # storage comes with the FSDP shard
                model = CausalLM(self.args, linear=self.linear, attention=self.attention)
            if self.group is None:
                raise RuntimeError("training role: shift up on a rank outside the training slot")
            self.trainer = Trainer(
                model,
                self.group,
                self.cfg,
                device=self.device,
                temperature=self.temperature,
                compute_dtype=self.compute_dtype,
            )
            if self.cfg.kl_coef:  # the initial policy, also when resuming from a checkpoint
                if self.policy is None:
                    raise ValueError("train.kl_coef > 0 needs the initial policy's folder")
                with torch.device(self.device), params_on_meta():
                    ref = CausalLM(self.args, linear=self.linear, attention=self.attention)
                self.trainer.attach_reference(ref, self.policy)
            if self.resume_from is not None:
                self.trainer.load(self.resume_from)
            else:
                self.trainer.shift_down(keep_master=False)  # the GPS Read below is the truth
                self.trainer.shift_up(shards)
        else:
            self.trainer.shift_up(shards)  # None: the master kept on host
        return {"reload": time.perf_counter() - t0}

    def _held(self) -> Trainer:
        """The trainer this rank holds; asked only after a shift up built it."""
        if self.trainer is None:
            raise RuntimeError("training role: no trainer on this rank (not shifted up)")
        return self.trainer

    def shift_down(self) -> dict[str, float]:
        t0 = time.perf_counter()
        self._held().shift_down()
        return {"offload": time.perf_counter() - t0}

    def train_step(self, batch: TrainBatch) -> dict[str, float]:
        metrics = asdict(self._held().train_step(batch))
        mismatch = metrics.pop("mismatch")
        return {k: float(v) for k, v in metrics.items()} | mismatch

    def shards(self) -> dict[str, torch.Tensor]:
        return self._held().policy_shards()

    def save(self, path: str) -> list[Path]:
        """Shards, optimizer and (rank 0) the HF policy; returns the files this rank wrote.
        Collective over the training group."""
        root, policy = Path(path), Path(path) / "policy"
        trainer = self._held()
        written = trainer.save(root)
        trainer.export_hf(policy, self.policy)
        if trainer.rank == 0:
            written += sorted(f for f in policy.iterdir() if f.is_file())
        return written


def _import_fsdp() -> None:
    import torch._dynamo  # noqa: F401
    import torch.distributed.fsdp  # noqa: F401
