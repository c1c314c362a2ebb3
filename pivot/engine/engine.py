"""The embedded inference engine: continuous batching over a paged KV cache.

Sequences that share a token prefix share its KV blocks (`BlockManager`): a GRPO group's G
copies of a prompt, or judge prompts that share the question, are prefilled once. New
weights (`load_weights`) drop every cached prefix. Models with linear-attention layers (the
Qwen3.5 hybrid) share no prefix: a reused KV prefix would skip the tokens' recurrent state,
which lives per sequence (`LinearStates`), so every sequence is computed from its first token.

It implements `pivot.engine.protocol.InferenceEngine`, as the production adapters do.

With `enable_kv_migration` an abort exports each partial's K/V to host memory and a partial
added with its handle continues from them instead of re-prefilling (pivot/engine/kv_export.py);
under TP `abort` and `add_all` are then lockstep collectives of the replica's group.

Under tensor parallelism every rank of the replica's group builds the engine and calls
`step()` (and `load_weights`, `release`, `resume`, `named_parameters_hf`) in lockstep; only
the leader (group rank 0) takes requests, schedules, samples and returns outputs, and the
followers run the step the leader broadcasts.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Iterable
from pathlib import Path

import torch
import torch.distributed as dist

from pivot.engine.block_manager import BlockManager
from pivot.engine.capabilities import capabilities
from pivot.engine.config import ATTENTIONS, FLASH_BLOCK_MULTIPLE, EngineConfig
from pivot.engine.kv_export import KVPorter, SliceOp, discard
from pivot.engine.kv_transport import KVPlace
from pivot.engine.model_runner import ModelRunner
from pivot.engine.request_rules import check_request, finish_reason
from pivot.engine.sampler import sample
from pivot.engine.scheduler import Scheduler
from pivot.engine.sequence import AbortResult, EngineStats, Output, Request, SeqStatus, Sequence
from pivot.model import CausalLM, TextTokenizer
from pivot.model import from_pretrained as load_model
from pivot.model.meta_init import is_meta

log = logging.getLogger(__name__)


def is_on_gpu(model: CausalLM) -> bool:
    return next(model.parameters()).device.type == "cuda"


class Engine:
    def __init__(
        self,
        model: CausalLM,
        config: EngineConfig | None = None,
        tp_group: dist.ProcessGroup | None = None,
        tokenizer: TextTokenizer | None = None,
        weights_version: int = 0,
        attention: str = "sdpa",
        seed: int = 0,
        device: torch.device | str | None = None,
    ) -> None:
        """`model` may be on the meta device (see `pivot.model.meta_init`): it is then sharded
        under TP first and only this rank's slices get storage on `device`; load weights next."""
        self.config = config = config or EngineConfig()
        if attention not in ATTENTIONS:
            raise ValueError(f"attention={attention!r} is not one of {ATTENTIONS}")
        on_gpu = torch.device(device).type == "cuda" if device is not None else is_on_gpu(model)
        kernel = config.paged_kernel(attention, on_gpu)
        block_size = config.kv_block_size(attention, on_gpu)
        if kernel == "flash" and block_size % FLASH_BLOCK_MULTIPLE:
            raise ValueError(
                f"engine.block_size={block_size}: flash attention's paged KV needs a multiple of {FLASH_BLOCK_MULTIPLE}"
            )
        if config.kv_capacity_tokens < block_size:
            raise ValueError(
                f"engine.kv_capacity_tokens={config.kv_capacity_tokens} is less than one block ({block_size})"
            )
        self.args = model.args
        self.tokenizer = tokenizer
        num_blocks = config.kv_capacity_tokens // block_size
        self.max_len = min(self.args.max_position_embeddings, num_blocks * block_size)
        # the widest decode graph: the role's longest sequence, not the model's
        graph_len = min(self.max_len, config.max_seq_len or self.max_len)
        weighted = not is_meta(model)  # built with its weights: no `load_weights` comes first
        self.runner = ModelRunner(
            model, num_blocks, block_size, kernel, tp_group, device,
            config.decode_graphs, config.max_running_seqs, graph_len, config.max_decode_graphs,
        )  # fmt: skip
        if weighted:  # built with its weights, before any work: every graph now (a replica a
            self.runner.capture_graphs()  # role shifts up captures the buckets it reaches)
        self.blocks = BlockManager(
            num_blocks, block_size, share_prefixes=not self.args.has_linear_attention
        )
        self.scheduler = Scheduler(self.blocks, config.max_running_seqs, config.max_prefill_tokens)
        eos = set(self.args.eos_ids)
        if tokenizer is not None:
            eos.update(tokenizer.eos_ids)
        self.eos_ids = frozenset(eos)
        self.generator = torch.Generator(device=self.runner.device).manual_seed(seed)
        self._seqs: dict[int, Sequence] = {}
        self._dropped: list[int] = []  # finished or aborted since the last step: state goes
        self._arrivals = 0
        self._version = weights_version
        self._weights_ready = True
        self._tokens_generated = 0
        self._last_latency = 0.0
        self.kv: KVPorter | None = None

    def enable_kv_migration(
        self, prefix: str, place: KVPlace | None = None, nixl_prefix: str = ""
    ) -> None:
        """Export aborted sequences' K/V to files `{prefix}_s{id}_n{k}_r{rank}` (host memory,
        e.g. /dev/shm) and import the handles partials arrive with. Every rank of the group.
        `place` (this rank's host, CUDA, NIXL link) and `nixl_prefix` decide which transports
        the exports are offered over (pivot/engine/kv_transport.py)."""
        self.kv = KVPorter(prefix, self.runner, self.blocks, self.scheduler, place, nixl_prefix)

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        config: EngineConfig | None = None,
        tp_group: dist.ProcessGroup | None = None,
        tokenizer: TextTokenizer | None = None,
        *,
        dtype: str = "float32",
        attention: str = "sdpa",
        device: str = "cpu",
        seed: int = 0,
    ) -> Engine:
        """The embedded engine over a HF-layout model folder and its weights (any backend:
        `pivot.engine.factory.build_engine`).

        `dtype` and `attention` are `ModelConfig`'s; `device` is this rank's device;
        `seed` seeds sampling for requests without a seed of their own.
        """
        config = config or EngineConfig()
        if capabilities(config.backend).owns_processes:
            raise ValueError(
                f"engine.backend={config.backend!r} is not the embedded engine: build it with "
                "pivot.engine.factory.build_engine"
            )
        model = load_model(path, dtype=getattr(torch, dtype), device=device)
        if tokenizer is None and (Path(path) / "tokenizer.json").is_file():
            tokenizer = TextTokenizer.from_pretrained(path)
        return cls(
            model, config, tp_group=tp_group, tokenizer=tokenizer, attention=attention, seed=seed
        )

    # ---- requests --------------------------------------------------------------------------
    def add(self, request: Request) -> None:
        """Queue a request (or a partial from `abort`: resumed from its KV handle, or re-prefilled)."""
        self.add_all([request])

    def add_all(self, requests: list[Request]) -> None:
        """`add` each. With KV migration on and a request carrying a KV handle, a collective of
        the TP group: followers pass the same requests and copy the leader's accepted slices."""
        collective = self.kv is not None and any(r.kv is not None for r in requests)
        porter = self.kv if collective else None
        if not self.runner.is_leader:
            if porter is not None:
                porter.load([])
            return
        ops: list[SliceOp] = []
        try:
            for request in requests:
                self._add(request, ops)
        finally:
            if porter is not None:
                porter.load(ops)

    def _add(self, request: Request, ops: list[SliceOp]) -> None:
        rid = request.id
        if rid in self._seqs:
            raise ValueError(f"request {rid}: id is already in this engine")
        tokens = check_request(request, self.args, self.max_len, self.tokenizer is not None)
        seq = Sequence(
            id=rid,
            token_ids=tokens,
            prompt_len=len(request.prompt_ids),
            params=request.params,
            logprobs=list(request.output_logprobs),
            arrival=self._arrivals,
            versions=request.versions,
        )
        self._arrivals += 1
        seq.recompute = bool(request.output_ids)  # a partial: unless its KV came along, recomputed
        if request.kv is not None and self.kv is None:
            discard(request.kv)
        elif (
            request.kv is not None
            and self.kv is not None
            and self.kv.arrive(seq, request.kv, self._version, ops)
        ):
            seq.recompute = False
            if rid in self._dropped:  # its old state here must not drop the imported one
                self._dropped.remove(rid)
        self._seqs[rid] = seq
        self.scheduler.add(seq)

    def abort(self, ids: Iterable[int], export: bool = True) -> AbortResult:
        """Stop sequences; each partial re-added anywhere continues where it stopped: from its
        exported K/V (KV migration on and `export`) or by re-prefill. With KV export under TP,
        a collective (followers pass the same ids and write their slices)."""
        porter = self.kv if export else None
        if not self.runner.is_leader:
            if porter is not None:
                porter.export([], self._version)
            return AbortResult([], [])
        partials, unknown, seqs = [], [], []
        for rid in dict.fromkeys(ids):  # each once
            seq = self._seqs.get(rid)
            if seq is None:
                unknown.append(rid)
            else:
                seqs.append(seq)
        handles = porter.export(seqs, self._version) if porter is not None else {}
        for seq in seqs:  # held until the export is done: a failure in it salvages them
            del self._seqs[seq.id]
            self.scheduler.remove(seq)
            self._drop_state(seq.id)
            seq.status = SeqStatus.FINISHED
            partials.append(seq.to_request(handles.get(seq.id)))
        if unknown:
            log.debug("abort: unknown request ids %s ignored", unknown)
        return AbortResult(partials, unknown)

    def salvage(self) -> list[Request]:
        """After a failure: every sequence, with the tokens it has (a token whose log-prob the
        failed step never recorded is dropped); nothing of the scheduler or the blocks is read."""
        out = []
        for seq in self._seqs.values():
            req = seq.to_request(None)
            n = min(len(req.output_ids), len(req.output_logprobs))
            out.append(
                dataclasses.replace(
                    req,
                    output_ids=req.output_ids[:n],
                    output_logprobs=req.output_logprobs[:n],
                    versions=req.versions.before(n),
                )
            )
        self._seqs.clear()
        return out

    def has_work(self) -> bool:
        return bool(self._seqs)

    @property
    def vocab_size(self) -> int:
        return self.args.vocab_size

    @property
    def graphs_capture_s(self) -> float:
        """Seconds this rank has spent capturing decode graphs."""
        return self.runner.graphs.capture_s

    def progress(self) -> dict[int, int]:
        """Tokens generated so far by each unfinished sequence (the monitor's progress feed)."""
        return {rid: seq.num_generated for rid, seq in self._seqs.items()}

    def can_admit(self, num_tokens: int) -> bool:
        """Whether a sequence of `num_tokens` tokens fits the free KV cache now."""
        if num_tokens >= self.max_len:
            return False
        return (
            self.blocks.blocks_for(num_tokens) * self.blocks.block_size
            <= self.scheduler.free_tokens_for_admission()
        )

    # ---- stepping --------------------------------------------------------------------------
    def step(self) -> list[Output]:
        """Run one engine step; returns the sequences that finished in it."""
        t0 = time.perf_counter()
        if not self._weights_ready:
            raise RuntimeError(
                "step: weights were released; call resume() then load_weights() first"
            )
        runner = self.runner
        if not runner.is_leader:
            step = runner.share(None)
            if step is not None:
                runner.run(step)
            return []
        plan = self.scheduler.schedule()
        step = runner.share(runner.build_input(plan, self.blocks, self._dropped) if plan else None)
        if step is None:
            return []
        self._dropped.clear()
        logits = runner.run(step)
        self.blocks.copies_done()
        self.scheduler.commit(plan)
        sampled = [p.seq for p in plan if p.samples]
        tokens, logprobs = sample(
            logits, [s.params for s in sampled], [s.num_generated for s in sampled], self.generator
        )
        outputs = []
        for seq, tok, lp in zip(sampled, tokens, logprobs):
            seq.made_token(self._version)
            seq.token_ids.append(tok)
            seq.logprobs.append(lp)
            self._tokens_generated += 1
            reason = finish_reason(seq, tok, self.eos_ids, self.max_len, self.tokenizer)
            if reason is not None:
                outputs.append(self._finish(seq, reason))
        self._last_latency = time.perf_counter() - t0
        return outputs

    def _drop_state(self, seq_id: int) -> None:
        """Free a finished or aborted sequence's linear-attention state: here now, on TP followers
        with the next step's input."""
        if self.runner.linear_states is not None:
            self.runner.linear_states.drop([seq_id])
            self._dropped.append(seq_id)

    def _finish(self, seq: Sequence, reason: str) -> Output:
        self.scheduler.remove(seq)
        self._drop_state(seq.id)
        seq.status = SeqStatus.FINISHED
        del self._seqs[seq.id]
        return Output(
            id=seq.id,
            prompt_ids=seq.token_ids[: seq.prompt_len],
            output_ids=seq.token_ids[seq.prompt_len :],
            output_logprobs=list(seq.logprobs),
            finish_reason=reason,
            weights_version=seq.versions.oldest(self._version),
            versions=seq.versions,
        )

    def stats(self) -> EngineStats:
        seqs = self._seqs.values()
        return EngineStats(
            n_seq=len(self._seqs),
            n_tok=sum(len(s.token_ids) for s in seqs),
            n_running=len(self.scheduler.running),
            running_tokens=sum(len(s.token_ids) for s in self.scheduler.running),
            kv_free_tokens=self.blocks.free_tokens,
            kv_total_tokens=self.blocks.total_tokens,
            tokens_generated=self._tokens_generated,
            last_step_latency_s=self._last_latency,
            weights_version=self._version,
            prefill_tokens=self.scheduler.prefill_tokens,
            prefix_hit_tokens=self.scheduler.prefix_hit_tokens,
            reprefill_tokens=self.scheduler.reprefill_tokens,
            graphs_captured=self.runner.graphs.captures,
            graphs_capture_s=self.runner.graphs.capture_s,
            **(self.kv.counters.stats() if self.kv is not None else {}),
        )

    # ---- weights and memory ----------------------------------------------------------------
    @property
    def weights_version(self) -> int:
        return self._version

    def load_weights(
        self,
        named_tensors: dict[str, torch.Tensor] | Iterable[tuple[str, torch.Tensor]],
        version: int,
    ) -> None:
        """Copy HF-named tensors in place, each either full or already this rank's TP slice;
        validated before anything is copied."""
        tensors = self.runner.validate(named_tensors)
        self.runner.load(tensors)
        self.blocks.reset_cache()  # cached K/V were computed with the old weights
        self._version = version
        self._weights_ready = True
        # nothing captured here: an update in place keeps the graphs it has, and a shift up (new
        # storage) captures each bucket when its first batch of that size comes, only the ones
        # its batches reach, off the shift's critical path (the Read)

    def weight_buffers(self) -> dict[str, torch.Tensor]:
        """This rank's parameter tensors by HF name (TP slices), to be filled in place, e.g. by a
        GPS Read; then `load_weights(buffers, version)` validates them and copies nothing."""
        return {name: p.data for name, p in self.runner.params.items()}

    def named_parameters_hf(self) -> dict[str, torch.Tensor]:
        """The current full weights by HF name, on CPU (collective under TP)."""
        return self.runner.named_full()

    def release(self) -> AbortResult:
        """Shift down: abort everything (re-prefilled elsewhere: the controller moved what it
        could with its KV before), free parameters and the KV cache."""
        partials = self.abort(list(self._seqs), export=False)
        self.runner.release()
        self.blocks.reset_cache()
        self._weights_ready = False
        return partials

    def resume(self) -> None:
        """Shift up: re-create parameter storage and the KV cache; then call `load_weights`."""
        if self.runner.cache is None:
            self.runner.resume()

    def shutdown(self) -> None:
        """Nothing to stop: the engine runs in this process (its memory goes with the object)."""
