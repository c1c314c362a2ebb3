"""The training role: an FSDP2-sharded policy, AdamW, and the PPO-clip step over a process group.

Layout: every decoder layer and then the root are `fully_shard`-ed on
`DeviceMesh.from_group(group)`, so each parameter (HF name) is split on dim 0 exactly as
`pivot.model.tp_plan.fsdp_range` says; `policy_shards()` returns this rank's pieces for the GPS
Write. Parameters are fp32 master weights; with a `compute_dtype` below fp32 (the model dtype,
bfloat16 on GPU clusters) forward and backward run in it and gradients reduce in fp32.
With `train.activation_checkpointing` each layer is checkpointed (non-reentrant, composable
`torch.distributed._composable.checkpoint`, names unchanged) before it is sharded.
A model built on the meta device (`pivot.model.meta_init`) gets storage for this rank's shards
only, after `fully_shard`; `from_pretrained` then reads just those rows from safetensors.

Data split: `train_step(batch)` is collective and takes the WHOLE batch on every rank; rank r
trains rows r, r+W, ... Micro-batches are packed per rank under `micro_batch_tokens` (real
tokens: rows laid end to end, attention kept within each, only response positions through the
LM head a chunk at a time; pivot/rl/logprobs.py) and every rank runs the same number of them
(empty ones run a zero-loss forward), so FSDP's collectives line up. Losses are normalised by
the whole batch's token (or sequence) count, so the result does not depend on the split.
Before each micro-batch the ranks agree that it fits in device memory (`pivot.roles.oom_guard`);
if it does not on some rank, the step runs again with half the token budget, kept for the rest
of the run.

Shift down offloads the optimizer state, the fp32 master shards and the KL loss's reference
shards (`attach_reference`) to host memory (pinned on CUDA) byte for byte and frees their device
storage; activations and grads are already gone
between steps. Shift up re-allocates the storages and restores the bytes, so training
continues bit-exactly. The GPS Read result passed to `shift_up(params)` may hold full
HF-named tensors or this rank's dim-0 shards; it is used when the master was not kept on host
(`shift_down(keep_master=False)`); with a kept master the master wins (it is the exact fp32
state, the GPS copy may be bf16) and `params` is only checked for names and shapes. While
shifted down the trainer holds an `Offloaded` record, and every method that needs the device
state refuses to run.

Checkpoints: `save` / `load` hand the live parameters' and AdamW state's shards to the trainer's
`TrainerCheckpoint` (`pivot.roles.trainer_checkpoint`), with the version and counters as explicit
inputs and outputs. `StepMetrics` is what one `train_step` reports.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import torch
import torch.distributed as dist

from pivot.config import TrainConfig
from pivot.config.train import UNKNOWN_DEVICE_MICRO_BATCH
from pivot.model import CausalLM, ModelArgs, save_pretrained
from pivot.model.hf_folder import copy_side_files
from pivot.model.meta_init import params_on_meta
from pivot.model.sliced_load import iter_boxes
from pivot.model.tp_plan import fsdp_range
from pivot.rl.algo import LossStats, LossTokens, ppo_clip_loss
from pivot.rl.batch import TrainBatch
from pivot.rl.logprobs import plan_micro_batches, response_logprobs
from pivot.rl.mismatch import correction_weights, mismatch_metrics, mismatch_sums
from pivot.roles.collective_write import CollectiveWrite
from pivot.roles.micro_batch import MicroBatch, StepLoss, StepSums, micro_batches
from pivot.roles.oom_guard import MicroBatchGuard
from pivot.roles.parallelize import parallelize
from pivot.roles.trainer_checkpoint import STATE_FILE, TrainerCheckpoint

if TYPE_CHECKING:  # FSDP's DTensor costs start-up time on ranks that never train (parallelize.py)
    from torch.distributed.tensor import DTensor


def _sharded(model: CausalLM) -> dict[str, DTensor]:
    """`model`'s parameters by name, tied ones once: after `parallelize` (FSDP2's fully_shard)
    each is a DTensor, which nn.Module's stub types as a plain Parameter."""
    return cast("dict[str, DTensor]", dict(model.named_parameters()))


def _reshard(model: CausalLM) -> None:
    """Free `model`'s gathered parameters: `parallelize` made it an FSDPModule."""
    from torch.distributed.fsdp import FSDPModule  # loaded already: the model is sharded

    if not isinstance(model, FSDPModule):
        raise TypeError(f"trainer: {type(model).__name__} is not FSDP-sharded (parallelize)")
    model.reshard()


log = logging.getLogger(__name__)
__all__ = ["STATE_FILE", "StepMetrics", "Trainer"]


@dataclass(kw_only=True)
class StepMetrics:
    loss: float
    grad_norm: float
    clip_frac: float
    approx_kl: float
    kl_ref: float
    tokens: int
    micro_batches: int
    skipped: bool
    version: int
    mismatch: dict[str, float]
    """The rollout/trainer log-prob mismatch and its correction (`pivot.rl.mismatch`)."""
    oom_splits: int = 0
    """Times this step was split because a micro-batch would not fit (`MicroBatchGuard`)."""
    micro_batch_tokens: int = 0
    """The token budget of a micro-batch after this step."""


OFFLOADED = ("master", "optim", "reference")
"""What a shift down moves to host memory: the fp32 master shards, the AdamW state, the KL
reference's shards."""


@dataclass
class Offloaded:
    """The trainer's device state while shifted down, per kind of `OFFLOADED`."""

    host: dict[str, list[torch.Tensor]]
    """Byte copies (uint8, pinned on CUDA) of the freed storages; none for an unkept master."""
    freed: dict[str, list[tuple[torch.UntypedStorage, int]]]
    """Each freed storage and the bytes it had, to re-allocate on shift up."""
    kept_master: bool


class Trainer:
    """One rank of the training role (see the module docstring). All public methods that touch
    parameters are collective over `group` unless said otherwise."""

    def __init__(
        self,
        model: CausalLM,
        group: dist.ProcessGroup,
        config: TrainConfig,
        *,
        device: str = "cpu",
        temperature: float = 1.0,
        compute_dtype: torch.dtype = torch.float32,
    ) -> None:
        self.config, self.group = config, group
        self.device = torch.device(device)
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        # the engine's log-probs are of the temperature-scaled distribution (raw for greedy)
        self.temperature = temperature if temperature > 0 else 1.0
        self.args = model.args
        self.model = model = parallelize(
            model,
            group,
            self.device,
            config.activation_checkpointing,
            compute_dtype,
            config.compile,
        )
        self.params = _sharded(model)  # tied weights appear once, under the embedding
        self.aliases = set(model.state_dict()) - set(self.params)
        self.optimizer = torch.optim.AdamW(
            model.parameters(),
            lr=config.lr,
            betas=(config.beta1, config.beta2),
            weight_decay=config.weight_decay,
        )
        self.compute_dtype = compute_dtype
        self.reference: CausalLM | None = None  # the KL loss's frozen initial policy
        self.version = 0  # steps taken, skipped ones included: the policy version (= the RL step, for staleness)
        self.bad_steps = 0  # consecutive skipped steps
        self._offloaded: Offloaded | None = None  # set while shifted down
        self.checkpoint = TrainerCheckpoint(self.params, self.optimizer, group)
        # 0 (auto) is resolved at launch by the memory plan (pivot/memory/fit.py); a trainer
        # built without a launch takes the unknown device's budget
        budget = config.micro_batch_tokens or UNKNOWN_DEVICE_MICRO_BATCH
        self.guard = MicroBatchGuard(budget, self.device, group)

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        group: dist.ProcessGroup,
        config: TrainConfig,
        *,
        device: str = "cpu",
        temperature: float = 1.0,
        compute_dtype: torch.dtype = torch.float32,
    ) -> Trainer:
        """Built on the meta device; each rank reads only its dim-0 rows of every tensor from the
        safetensors files. Collective (FSDP set-up)."""
        with torch.device(device), params_on_meta():
            model = CausalLM(ModelArgs.load(path))
        trainer = cls(
            model,
            group,
            config,
            device=device,
            temperature=temperature,
            compute_dtype=compute_dtype,
        )
        trainer._load_rows(trainer.params, path)
        return trainer

    def _load_rows(self, params: dict[str, DTensor], path: str | Path) -> None:
        """Read this rank's dim-0 rows of every tensor of `params` from the folder's safetensors,
        one slice at a time (the rank holds its shard plus one tensor's rows)."""
        boxes = {}
        for name, p in params.items():
            start, stop = fsdp_range(p.shape[0], self.rank, self.world)
            boxes[name] = ((start, stop), *((0, n) for n in p.shape[1:]))
        with torch.no_grad():
            for name, rows in iter_boxes(path, boxes, torch.float32):
                params[name].to_local().copy_(rows)

    def attach_reference(self, model: CausalLM, path: str | Path) -> None:
        """The KL loss's reference: `model` (built like the policy, on the meta device) sharded
        the same way, frozen, with `path`'s weights (the initial policy). Collective."""
        self.reference = parallelize(model, self.group, self.device, False, self.compute_dtype)
        self.reference.eval().requires_grad_(False)
        self._load_rows(_sharded(self.reference), path)

    # ---- shift down / up ------------------------------------------------------------------

    def _storages(self, which: str) -> list[torch.UntypedStorage]:
        """The distinct non-empty device storages of one kind of `OFFLOADED`."""
        if which == "master":
            tensors = [p.to_local() for p in self.params.values()]
        elif which == "reference":
            params = _sharded(self.reference).values() if self.reference is not None else []
            tensors = [p.to_local() for p in params]
        else:
            tensors = [
                v.to_local() if hasattr(v, "to_local") else v
                for s in self.optimizer.state.values()
                for v in s.values()
                if isinstance(v, torch.Tensor)
            ]
        seen: dict[int, torch.UntypedStorage] = {}
        for t in tensors:
            st = t.untyped_storage()
            if st.nbytes() and st.data_ptr() not in seen:
                seen[st.data_ptr()] = st
        return list(seen.values())

    def shift_down(self, keep_master: bool = True) -> None:
        """Offload the optimizer state, the KL reference's shards and (unless
        `keep_master=False`) the fp32 master shards to host memory and free the device storage
        of all three. Local: no collective."""
        if self._offloaded is not None:
            raise RuntimeError("trainer is already shifted down")
        self.optimizer.zero_grad(set_to_none=True)
        pin = self.device.type == "cuda"
        off = Offloaded({which: [] for which in OFFLOADED}, {}, keep_master)
        for which in OFFLOADED:
            freed = []
            for st in self._storages(which):
                if which != "master" or keep_master:
                    host = torch.empty(st.nbytes(), dtype=torch.uint8, pin_memory=pin)
                    host.untyped_storage().copy_(st)
                    off.host[which].append(host)
                freed.append((st, st.nbytes()))
                st.resize_(0)
            off.freed[which] = freed
        self._offloaded = off
        if (
            self.device.type == "cuda"
        ):  # hand the freed blocks back to the driver: torch's allocator
            torch.cuda.empty_cache()  # would keep them cached, out of reach of an sglang process here

    def shift_up(self, params: dict[str, torch.Tensor] | None = None) -> None:
        """Re-allocate and restore the offloaded state; parameters come from the host master or,
        if it was not kept, from `params` (full HF tensors or this rank's shards). Local."""
        off = self._offloaded
        if off is None:
            raise RuntimeError("trainer is not shifted down")
        if params is not None:
            params = self._shards_from(params)
        elif not off.kept_master:
            raise ValueError("shift_up needs params: the master weights were not kept on host")
        for which in OFFLOADED:
            hosts = off.host[which]
            for k, (st, nbytes) in enumerate(off.freed[which]):
                st.resize_(nbytes)
                if which != "master" or off.kept_master:
                    st.copy_(hosts[k].untyped_storage())
        if not off.kept_master:
            with torch.no_grad():
                for name, p in self.params.items():
                    p.to_local().copy_(params[name])  # type: ignore[index]
        self._offloaded = None

    def _shards_from(self, params: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """This rank's dim-0 shard of each parameter from full tensors or shards; errors name the tensor."""
        out = {}
        for name, p in self.params.items():
            if name not in params:
                raise ValueError(f"shift_up: tensor {name!r} missing from the given parameters")
            t, full, local = params[name], tuple(p.shape), tuple(p.to_local().shape)
            if tuple(t.shape) == full:
                start, stop = fsdp_range(full[0], self.rank, self.world)
                t = t[start:stop]
            elif tuple(t.shape) != local:
                raise ValueError(
                    f"shift_up: tensor {name!r} has shape {tuple(t.shape)}, expected full {full} or shard {local}"
                )
            out[name] = t.to(dtype=torch.float32)
        extra = sorted(set(params) - set(self.params) - self.aliases)
        if extra:
            raise ValueError(f"shift_up: unexpected tensor {extra[0]!r}")
        return out

    def _check_up(self) -> None:
        if self._offloaded is not None:
            raise RuntimeError("trainer is shifted down; call shift_up first")

    # ---- forward -------------------------------------------------------------------------

    def _logprobs(
        self, prompts: list[list[int]], responses: list[list[int]]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return response_logprobs(
            self.model,
            prompts,
            responses,
            self.temperature,
            self.device,
            self.config.logprob_chunk_tokens,
        )

    def _plans(self, batch: TrainBatch) -> tuple[list[list[list[int]]], list[int]]:
        """Every rank's micro-batches (row indices) under the guard's budget, and the rows'
        lengths; every rank runs as many micro-batches as the longest plan."""
        lengths = [len(p) + len(r) for p, r in zip(batch.prompt_ids, batch.response_ids)]
        return plan_micro_batches(lengths, self.world, self.guard.budget), lengths

    def _dummy_backward(self) -> None:
        """A zero-loss pass so this rank joins FSDP's collectives when it has no rows left."""
        self.model(torch.zeros(1, 1, dtype=torch.long, device=self.device)).sum().mul(
            0.0
        ).backward()

    @torch.no_grad()
    def compute_logprobs(
        self, prompts: list[list[int]], responses: list[list[int]]
    ) -> list[list[float]]:
        """Log-probs of every response token under the current policy (whole batch, every rank)."""
        self._check_up()
        batch = TrainBatch(prompts, responses, [0.0] * len(prompts))
        plans, _ = self._plans(batch)
        mine, count = plans[self.rank], max(len(p) for p in plans)
        local: dict[int, list[float]] = {}
        for m in range(count):
            rows = mine[m] if m < len(mine) else []
            if not rows:
                self.model(torch.zeros(1, 1, dtype=torch.long, device=self.device))
                continue
            lp, _ = self._logprobs([prompts[i] for i in rows], [responses[i] for i in rows])
            for k, i in enumerate(rows):
                local[i] = lp[k, : len(responses[i])].tolist()
        gathered: list[dict[int, list[float]]] = [{} for _ in range(self.world)]
        dist.all_gather_object(gathered, local, group=self.group)
        merged = {i: v for part in gathered for i, v in part.items()}
        return [merged[i] for i in range(len(prompts))]

    # ---- the step ------------------------------------------------------------------------

    def train_step(self, batch: TrainBatch) -> StepMetrics:
        """One policy update on the whole batch; a NaN/inf loss or gradient skips it (weights and
        optimizer state untouched) and too many consecutive skips raise RuntimeError. A
        micro-batch that would not fit in device memory on some rank splits the step
        (`MicroBatchGuard`): it runs again with half the token budget."""
        self._check_up()
        cfg = self.config
        if not len(batch):
            raise ValueError("train_step: empty batch")
        if cfg.kl_coef and batch.ref_logprobs is None and self.reference is None:
            raise ValueError(
                "train.kl_coef > 0 needs a reference (attach_reference) or TrainBatch.ref_logprobs"
            )
        self.model.train()
        splits = self.guard.splits
        while (done := self._accumulate(batch)) is None:
            self.optimizer.zero_grad(set_to_none=True)  # the split step starts from nothing
        sums, gap, peaks = done.totals, done.gap, done.peaks
        max_norm = cfg.grad_clip if cfg.grad_clip > 0 else math.inf
        norm = torch.nn.utils.clip_grad_norm_(list(self.params.values()), max_norm)
        norm_value = float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)
        dist.all_reduce(sums, group=self.group)
        dist.all_reduce(gap, group=self.group)
        dist.all_reduce(peaks, op=dist.ReduceOp.MAX, group=self.group)
        loss_value = float(sums[0])
        bad = not (math.isfinite(loss_value) and math.isfinite(norm_value))
        if bad:
            self.optimizer.zero_grad(set_to_none=True)
            self.bad_steps += 1
            log.warning(
                "train step skipped: loss=%s grad_norm=%s (%d in a row)",
                loss_value,
                norm_value,
                self.bad_steps,
            )
            if self.bad_steps >= cfg.max_bad_steps:
                raise RuntimeError(
                    f"{self.bad_steps} consecutive training steps had NaN/inf loss or gradients; aborting"
                )
        else:
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            self.bad_steps = 0
        # a skipped step still advances the version: were it to lag the step count, the staleness
        # bound (step - version) would shrink with every skip until no rollout may start
        self.version += 1
        tokens = max(float(sums[1]), 1.0)
        return StepMetrics(
            loss=loss_value,
            grad_norm=norm_value,
            clip_frac=float(sums[2]) / tokens,
            approx_kl=float(sums[3]) / tokens,
            kl_ref=float(sums[4]) / tokens,
            tokens=int(sums[1]),
            micro_batches=done.count,
            skipped=bad,
            version=self.version,
            mismatch=mismatch_metrics(gap.cpu(), peaks.cpu()),
            oom_splits=self.guard.splits - splits,
            micro_batch_tokens=self.guard.budget,
        )

    def _accumulate(self, batch: TrainBatch) -> StepSums | None:
        """Forward and backward of this rank's micro-batches, gradients accumulated, and what
        they add up to. None: a micro-batch would not fit on some rank and the guard halved the
        budget (the gradients so far are to be dropped)."""
        loss = StepLoss.of(self.config, batch)
        plans, lengths = self._plans(batch)
        sums = StepSums(self.device, max(len(p) for p in plans))
        for mb in micro_batches(batch, plans[self.rank], sums.count, lengths):
            if not self.guard.fits(mb.tokens):
                self.guard.split(any(len(m) > 1 for plan in plans for m in plan), max(lengths))
                return None
            if not mb.rows:
                self._idle_micro_batch(loss.reference_forward)
                continue
            value, stats = self._train_micro_batch(batch, mb, loss, sums)
            self.guard.measured(mb.tokens)
            sums.add_loss(value, stats)
        return sums

    def _idle_micro_batch(self, reference_forward: bool) -> None:
        """A rank with no rows left joins the micro-batch's collectives: FSDP's all-gathers of
        the policy (a zero-loss pass) and, where it runs, of the reference."""
        if reference_forward:
            assert self.reference is not None  # train_step refuses kl_coef > 0 without one
            with torch.no_grad():
                self.reference(torch.zeros(1, 1, dtype=torch.long, device=self.device))
            _reshard(self.reference)
        self._dummy_backward()

    def _train_micro_batch(
        self, batch: TrainBatch, mb: MicroBatch, loss: StepLoss, sums: StepSums
    ) -> tuple[torch.Tensor, LossStats]:
        """One micro-batch's forward and backward, its mismatch added to `sums`; returns its
        loss and the loss's statistics."""
        # before the policy's forward, as on a rank with no rows left
        ref_lp = self._reference_logprobs(mb) if loss.reference_forward else None
        lp, mask = self._logprobs(mb.prompts, mb.responses)
        if batch.response_mask is not None:  # tools' responses: never in the loss or the figures
            mask = mask * self._pad(batch.response_mask, mb.rows, lp)
        behaviour = (
            self._pad(batch.behaviour_logprobs, mb.rows, lp)
            if batch.behaviour_logprobs is not None
            else lp.detach()
        )
        current = self._token_versions(batch, mb.rows, lp) == self.version
        sums.add_mismatch(*mismatch_sums(lp, behaviour, mask, current))
        weights = correction_weights(lp, behaviour, mask, loss.correction, sums.gap)
        if ref_lp is None and batch.ref_logprobs is not None:
            ref_lp = self._pad(batch.ref_logprobs, mb.rows, lp)
        tokens = LossTokens(
            logprobs=lp,
            # corrected: the IS weight carries the rollout -> trainer gap, PPO's ratio is taken
            # against the trainer's own log-probs (veRL's decoupled mode; pivot/rl/mismatch.py)
            behaviour_logprobs=lp.detach() if loss.correction.active else behaviour,
            advantages=torch.tensor([batch.advantages[i] for i in mb.rows], device=self.device),
            mask=mask,
            ref_logprobs=ref_lp,
            token_weights=weights,
        )
        value, stats = ppo_clip_loss(tokens, loss.options, loss.normalizer)
        # FSDP averages gradients over ranks; the loss is already a share of the global one
        (value * self.world).backward()
        return value, stats

    def _reference_logprobs(self, mb: MicroBatch) -> torch.Tensor:
        """The KL loss's reference log-probs of the micro-batch's responses."""
        assert self.reference is not None  # train_step refuses kl_coef > 0 without one
        with torch.no_grad():
            ref_lp, _ = response_logprobs(
                self.reference,
                mb.prompts,
                mb.responses,
                self.temperature,
                self.device,
                self.config.logprob_chunk_tokens,
            )
        _reshard(self.reference)  # FSDP keeps the root gathered after a forward
        return ref_lp

    def _token_versions(
        self, batch: TrainBatch, rows: list[int], like: torch.Tensor
    ) -> torch.Tensor:
        """[B, T] the one policy version that made each response token and every token before it,
        -1 where that is not one version (or not known): a token made after an in-flight update
        attends K/V the older version computed, so its log-prob is of neither version's model
        and the gap to the trainer's is not the engine's numerics."""
        out = torch.full(like.shape, -1, dtype=torch.long, device=like.device)
        if batch.version_starts is None:
            return out
        for k, i in enumerate(rows):
            starts = batch.version_starts[i]
            if starts:
                stop = starts[1][1] if len(starts) > 1 else out.shape[1]
                out[k, :stop] = starts[0][0]
        return out

    def _pad(
        self, rows_values: Sequence[Sequence[float]], rows: list[int], like: torch.Tensor
    ) -> torch.Tensor:
        out = torch.zeros_like(like)
        for k, i in enumerate(rows):
            if rows_values[i]:
                out[k, : len(rows_values[i])] = torch.tensor(rows_values[i], dtype=out.dtype)
        return out

    # ---- weights out ---------------------------------------------------------------------

    def policy_shards(self) -> dict[str, torch.Tensor]:
        """HF name -> this rank's fp32 dim-0 shard (rows `fsdp_range(size, rank, world)`). Local;
        the tensors alias the live parameters: copy them before the next step if needed."""
        self._check_up()
        return {name: p.to_local().detach() for name, p in self.params.items()}

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        """HF name -> full fp32 tensor on CPU, on every rank (collective)."""
        self._check_up()
        return {name: p.full_tensor().detach().cpu() for name, p in self.params.items()}

    def export_hf(self, path: str | Path, source: str | Path | None = None) -> None:
        """Write the policy in Hugging Face layout, with the tokenizer, chat template and
        generation files of the `source` folder it was trained from (rank 0 writes; collective)."""
        state = self.full_state_dict()
        with CollectiveWrite(path) as write:
            if self.rank == 0:
                model = CausalLM(self.args)
                model.load_state_dict(state, strict=False)
                save_pretrained(model, path)
                if source is not None:
                    copy_side_files(source, path)
        write.agree(self.group)  # the barrier: a failed write stops every rank here, none hangs

    # ---- checkpoint ----------------------------------------------------------------------

    def save(self, path: str | Path, extra: dict[str, Any] | None = None) -> list[Path]:
        """Each rank writes its parameter and AdamW shards; rank 0 writes `trainer.json`
        (version, counters, shapes, JSON-able `extra` such as the data cursor). Collective;
        returns the files this rank wrote."""
        self._check_up()
        return self.checkpoint.save(
            path,
            version=self.version,
            bad_steps=self.bad_steps,
            config=self.config,
            extra=extra,
            micro_batch_tokens=self.guard.budget,
        )

    def load(self, path: str | Path) -> dict[str, Any]:
        """Restore what `save` wrote (by any number of training ranks); returns `extra`. Local
        reads + barrier."""
        self._check_up()
        restored = self.checkpoint.load(path)
        self.version, self.bad_steps = restored.version, restored.bad_steps
        if restored.micro_batch_tokens:  # a split is kept across a restart (or a lower flag wins)
            self.guard.budget = min(self.guard.budget, restored.micro_batch_tokens)
        return restored.extra
