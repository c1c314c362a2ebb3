"""Runs one step of the model over a paged KV cache; owns parameters and the cache.

Builds the packed step input from the scheduler's plan (on the TP leader), shares it with
the followers, runs the forward pass with `PagedAttention`, and returns full-vocabulary
logits for the sequences that sample. Also holds weight IO: in-place loading of full HF
tensors (sharded here under TP), gathering them back, and release / re-creation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from itertools import chain

import torch
import torch.distributed as dist

from pivot.engine.attention import KVCache, PagedAttention, StepInput
from pivot.engine.block_manager import BlockManager
from pivot.engine.decode_graphs import DecodeGraphs
from pivot.engine.flex_paged import FlexTables
from pivot.engine.linear_state import LinearStates
from pivot.engine.scheduler import ScheduledSeq
from pivot.engine.tp import fused_sections, gather_tensor, shard_model, shard_tensor
from pivot.model import CausalLM
from pivot.model.meta_init import is_meta, materialize


class ModelRunner:
    def __init__(
        self,
        model: CausalLM,
        num_blocks: int,
        block_size: int,
        kernel: str,
        tp_group: dist.ProcessGroup | None,
        device: torch.device | str | None = None,
        decode_graphs: str = "off",
        max_batch: int = 1,
        max_len: int = 1,
        max_graphs: int = 64,
    ) -> None:
        """`decode_graphs` (`EngineConfig.decode_graphs`): decode steps of up to `max_batch`
        sequences and `max_len` tokens of context replay graphs (pivot/engine/decode_graphs.py)."""
        self.model = model.eval().requires_grad_(False)
        self.args = model.args
        self.group = (
            tp_group if tp_group is not None and dist.get_world_size(tp_group) > 1 else None
        )
        self.rank = dist.get_rank(self.group) if self.group is not None else 0
        self.world = dist.get_world_size(self.group) if self.group is not None else 1
        self.full_shapes = {n: tuple(p.shape) for n, p in self.model.named_parameters()}
        if self.group is not None:
            shard_model(self.model, self.group)
        if is_meta(self.model):  # built without storage: only this rank's slices get some
            if device is None:
                raise ValueError("a model on the meta device needs the engine's device")
            materialize(self.model, device)
        self.params = dict(self.model.named_parameters())
        self.local_shapes = {n: tuple(p.shape) for n, p in self.params.items()}
        p0 = next(iter(self.params.values()))
        self.dtype, self.device = p0.dtype, p0.device
        self.kernel, self.num_blocks, self.block_size = kernel, num_blocks, block_size
        self.cache: KVCache | None = None
        self.linear_states = LinearStates() if self.args.has_linear_attention else None
        self.max_batch = max_batch
        self.flex: FlexTables | None = None
        self._alloc_cache()
        self.graphs = DecodeGraphs(
            graph_forward(self.model), decode_graphs, kernel, max_batch, max_len,
            self.args.vocab_size, max_graphs, self._why_not_graphed(),
        )  # fmt: skip
        self.graphs.active(self.device)  # a mode this device cannot run fails here, in one line

    def _why_not_graphed(self) -> str:
        if self.args.has_linear_attention:
            return "linear-attention layers keep per-sequence state"
        if any(self.args.is_moe_layer(i) for i in range(self.args.num_hidden_layers)):
            return "MoE routing syncs with the host every layer"
        return ""

    @property
    def is_leader(self) -> bool:
        return self.rank == 0

    def _alloc_cache(self) -> None:
        self.cache = KVCache(
            [i for i in range(self.args.num_hidden_layers) if not self.args.is_linear_attention(i)],
            self.num_blocks,
            self.block_size,
            self.args.num_key_value_heads // self.world,
            self.args.head_dim,
            self.dtype,
            self.device,
        )
        if self.kernel == "flex":
            self.flex = FlexTables(self.max_batch, self.num_blocks, self.block_size, self.device)

    @staticmethod
    def build_input(
        plan: list[ScheduledSeq], blocks: BlockManager, dropped: list[int]
    ) -> StepInput:
        tables = blocks.tables
        if all(p.num_tokens == 1 for p in plan):  # decoding: one token per sequence
            tokens = [p.seq.token_ids[p.start] for p in plan]
        else:
            tokens = list(
                chain.from_iterable(p.seq.token_ids[p.start : p.start + p.num_tokens] for p in plan)
            )
        q_lens = torch.tensor([p.num_tokens for p in plan])
        last = q_lens.cumsum(0) - 1
        return StepInput(
            token_ids=torch.tensor(tokens),
            q_lens=q_lens,
            ctx_lens=torch.tensor([p.start + p.num_tokens for p in plan]),
            block_ids=torch.tensor(list(chain.from_iterable(tables[p.seq.id] for p in plan))),
            sample_rows=last[torch.tensor([p.samples for p in plan])],
            copies=torch.tensor(list(chain.from_iterable(blocks.copies)), dtype=torch.long),
            seq_ids=torch.tensor([p.seq.id for p in plan]),
            dropped=torch.tensor(dropped, dtype=torch.long),
        )

    def share(self, step: StepInput | None) -> StepInput | None:
        """The leader's step input on every rank of the TP group (None: nothing to run).

        Two tensor broadcasts (size, then the packed fields); nothing is pickled."""
        if self.group is None:
            return step
        device = self.device if self.device.type == "cuda" else torch.device("cpu")
        packed = None if step is None else step.pack().to(device)
        size = torch.tensor([0 if packed is None else len(packed)], device=device)
        dist.broadcast(size, group_src=0, group=self.group)
        if int(size) == 0:
            return None
        if packed is None:
            packed = torch.empty(int(size), dtype=torch.long, device=device)
        dist.broadcast(packed, group_src=0, group=self.group)
        return step if step is not None else StepInput.unpack(packed.cpu())

    @torch.inference_mode()
    def capture_graphs(self) -> None:
        """The decode graphs this replica will replay, all now (it starts, or shifts up)."""
        if self.cache is not None:
            self.graphs.capture_all(self.cache, self.flex)

    @torch.inference_mode()
    def run(self, step: StepInput) -> torch.Tensor:
        """Logits [len(step.sample_rows), vocab] in fp32."""
        if self.cache is None:
            raise RuntimeError("engine is released: call resume() and load_weights() first")
        if self.linear_states is not None:
            self.linear_states.drop(step.dropped.tolist())
        self.cache.copy_blocks(step.copies)
        logits = self.graphs.run(step, self.cache, self.flex)
        if logits is not None:  # a decode step, replayed: its sampling rows
            return logits
        attn = PagedAttention(
            self.cache, step, self.kernel, self.device, self.linear_states, self.flex
        )
        ids = step.token_ids.to(self.device)[None]
        hidden = self.model.model(ids, attn.positions[None], attn)[0]
        return self.model.lm_head(hidden[step.sample_rows.to(self.device)]).float()

    # ---- weights -------------------------------------------------------------------------
    def validate(
        self, named: Iterable[tuple[str, torch.Tensor]] | dict[str, torch.Tensor]
    ) -> dict[str, torch.Tensor]:
        return validate_weights(
            named, self.full_shapes, self.args.tie_word_embeddings, self.local_shapes
        )

    @torch.no_grad()
    def load(self, tensors: dict[str, torch.Tensor]) -> None:
        """Full tensors are sliced here; this rank's TP slices (a GPS Read) are copied as they are."""
        for name, param in self.params.items():
            t = tensors[name]
            if (
                t.data_ptr() != param.data_ptr()
            ):  # filled in place already (`Engine.weight_buffers`)
                sections = fused_sections(name, self.args)
                param.data.copy_(
                    t
                    if t.shape == param.shape
                    else shard_tensor(name, t, self.rank, self.world, sections)
                )

    @torch.no_grad()
    def named_full(self) -> dict[str, torch.Tensor]:
        if self.cache is None:
            raise RuntimeError("engine is released: no weights to read")
        return {
            n: gather_tensor(n, p.data, self.group, fused_sections(n, self.args)).cpu()
            for n, p in self.params.items()
        }

    def release(self) -> None:
        self.graphs.clear()
        self.cache, self.flex = None, None
        if self.linear_states is not None:
            self.linear_states.clear()
        for p in self.params.values():
            p.data = torch.empty(0, dtype=self.dtype, device=self.device)
        if self.device.type == "cuda":
            torch.cuda.empty_cache()

    def resume(self) -> None:
        for name, p in self.params.items():
            p.data = torch.empty(self.local_shapes[name], dtype=self.dtype, device=self.device)
        self._alloc_cache()


def graph_forward(
    model: CausalLM,
) -> Callable[[torch.Tensor, torch.Tensor, object], torch.Tensor]:
    """The decode graphs' forward over `model`: a closure, not a bound method of the runner,
    whose graphs would then hold the runner (a reference cycle: `del engine` would free no
    parameters or KV cache until the garbage collector ran)."""

    def forward(ids: torch.Tensor, positions: torch.Tensor, attn: object) -> torch.Tensor:
        hidden = model.model(ids[None], positions[None], attn)[0]
        return model.lm_head(hidden).float()

    return forward


def validate_weights(
    named: Iterable[tuple[str, torch.Tensor]] | dict[str, torch.Tensor],
    full_shapes: dict[str, tuple[int, ...]],
    tied: bool,
    local_shapes: dict[str, tuple[int, ...]] | None = None,
) -> dict[str, torch.Tensor]:
    """Check names and shapes (full, or this rank's slice from `local_shapes`) of a weight update
    before anything is copied."""
    tensors = dict(named.items() if isinstance(named, dict) else named)
    if tied:
        tensors.pop("lm_head.weight", None)  # tied: the embedding is the head
    for name, shape in full_shapes.items():
        if name not in tensors:
            raise ValueError(f"load_weights: tensor {name!r} is missing")
        got = tuple(tensors[name].shape)
        if got != shape and (local_shapes is None or got != local_shapes[name]):
            raise ValueError(f"load_weights: tensor {name!r} has shape {got}, expected {shape}")
    extra = sorted(set(tensors) - set(full_shapes))
    if extra:
        raise ValueError(
            f"load_weights: unexpected tensor {extra[0]!r} ({len(extra)} unexpected in all)"
        )
    return tensors
