"""The runtime's view of GPS: which layout each role reads, and the policy's version numbers.

Every shift up is one GPS Read whatever the role, in the destination's real layout: each rank of
an inference replica of TP=k reads exactly its TP slice (`parallel_layout` over the slot's ranks,
the split the embedded engine shards by), the trainer reads its FSDP dim-0 shards. A replica
whose engine `reads_whole_model` (vLLM, sglang: `pivot.engine.capabilities`) reads the whole
model on its leader, into host memory (the engine shards it under its own TP), and nothing on
its parked ranks.
The trainer Writes its shards after every step. GPS stores the policy version itself (= training
steps done): the start-up Write publishes the job's first version (0, or a resumed job's
checkpoint's), and each Write after it the next, so the numbers read and written here are the
policy's. The GenRM, never trained, is version 0.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
import torch.distributed as dist

from pivot.dist import Slot
from pivot.gps.layout import Layout, fsdp_layout, gps_layouts, parallel_layout, split_views
from pivot.gps.spec import TensorSpec
from pivot.gps.store import GPSStore
from pivot.gps.torch_specs import TORCH_DTYPES
from pivot.model.tp_plan import merge_view, split_view


class WeightService:
    def __init__(
        self,
        store: GPSStore,
        specs: Mapping[str, list[TensorSpec]],
        host_of: tuple[int, ...],
        train: Slot,
        start_version: int,
        device: str,
        host_memory_gb: float = 0.0,
        verify: bool = False,
        dtype: str = "",
        whole: frozenset[str] = frozenset(),
    ) -> None:
        """`dtype`: what GPS holds floating tensors in (the model dtype, e.g. bfloat16, so buffers
        and Reads are that size); empty = as the checkpoint stores them. `whole`: the roles whose
        replicas read the model whole on their leader (their engine `reads_whole_model`)."""
        self.whole = whole
        floats = ("float32", "float16", "bfloat16", "float64")
        # GPS holds each tensor in its split view (a fused experts' gate_up_proj [E, 2, I, H], so a
        # TP rank's slice of both halves is one box); tensors are reshaped as they cross (`_cast`, `read`)
        self.specs = {
            model: split_views(
                [
                    TensorSpec(s.name, s.shape, dtype if dtype and s.dtype in floats else s.dtype)
                    for s in ss
                ]
            )
            for model, ss in specs.items()
        }
        self.store, self.host_of, self.train = store, host_of, train
        self.device, self.verify = device, verify
        self.first_version = {"policy": start_version, "genrm": 0}  # of the start-up Write
        self.last_read_bytes = 0  # of the latest `read`, for the shift-up record
        self.last_remote_bytes = 0  # ... of which read from another host's copy
        hosts = sorted(set(host_of))
        # replication-first; a host budget too small for every model falls back to groups of k hosts
        budget = int(host_memory_gb * 1e9) if host_memory_gb > 0 else 1 << 62
        for layout in gps_layouts(self.specs, hosts, budget).values():
            store.register(layout)
        self._train_layout = (
            fsdp_layout("policy", self.specs["policy"], train.ranks, host_of)
            if train.ranks
            else None
        )
        self._replica_layouts: dict[tuple[str, str], Layout] = {}

    def _policy_shards(self) -> Layout:
        """The training pool's FSDP layout of the policy; only asked where there is a pool."""
        if self._train_layout is None:
            raise RuntimeError("GPS weights: no training pool, so no FSDP layout of the policy")
        return self._train_layout

    def resize_training(self, train: Slot) -> None:
        """The training slot moved (pivot/runtime/control/sizing.py): its ranks Write the policy
        in their FSDP shards from now on."""
        self.train = train
        self._train_layout = fsdp_layout("policy", self.specs["policy"], train.ranks, self.host_of)

    def publish(self, model: str, tensors: Mapping[str, torch.Tensor]) -> int:
        """Write a whole model from this rank alone (start-up: the initial checkpoints)."""
        layout = parallel_layout(model, self.specs[model], [self.store.info.rank], self.host_of)
        return self.store.write(
            model, layout, self._cast(model, tensors), version=self.first_version[model]
        )

    def _cast(self, model: str, tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        dtypes = {s.name: TORCH_DTYPES[s.dtype] for s in self.specs[model]}
        return {
            name: t.to(dtypes[name]).reshape(split_view(name, tuple(t.shape)))
            for name, t in tensors.items()
        }

    def layout(self, model: str, slot: Slot) -> Layout:
        """The layout `slot` reads `model` in: FSDP shards for the trainer, TP slices for a replica
        (group rank t = position t in `slot.ranks`, as `dist.new_group` orders them)."""
        if slot.role == "train":
            return self._policy_shards()
        key = (model, slot.name)
        if key not in self._replica_layouts:
            whole = slot.role in self.whole
            self._replica_layouts[key] = parallel_layout(
                model,
                self.specs[model],
                slot.ranks[:1] if whole else slot.ranks,
                self.host_of,
                tp=1 if whole else len(slot.ranks),
            )
        return self._replica_layouts[key]

    def read(
        self,
        model: str,
        slot: Slot,
        version: int | None,
        out: Mapping[str, torch.Tensor] | None = None,
    ) -> tuple[dict[str, torch.Tensor], int]:
        """This rank's part of `model` for `slot`: its TP slices or its FSDP shards, read straight
        into `out` (e.g. the engine's parameters) where a tensor's shape and dtype match GPS's,
        else into fresh tensors (then copied into `out`, casting, and returned as `out`'s).
        A tensor GPS keeps whole that `out` holds a slice of (a fused tensor, see `tp_plan`)
        comes back full, for the engine's `load_weights` to slice."""
        layout = self.layout(model, slot)
        device = "cpu" if slot.role == "train" or slot.role in self.whole else self.device
        targets = None
        if out is not None:
            targets = {}
            for name, _, piece in layout.held_by(self.store.info.place):
                given, dtype = out.get(name), TORCH_DTYPES[layout.spec(name).dtype]
                if given is not None and given.dim() != len(piece.shape) and given.is_contiguous():
                    given = given.view(
                        split_view(name, tuple(given.shape))
                    )  # same storage, GPS's view
                fits = (
                    given is not None and tuple(given.shape) == piece.shape and given.dtype == dtype
                )
                targets[name] = (
                    given
                    if fits and given is not None
                    else torch.empty(piece.shape, dtype=dtype, device=device)
                )
        tensors, got = self.store.read(model, layout, version, out=targets, device=device)
        self.last_read_bytes = sum(t.numel() * t.element_size() for t in tensors.values())
        self.last_remote_bytes = self.store.last_remote_bytes
        for name, t in list(tensors.items()):
            tensors[name] = t = t.view(
                merge_view(name, tuple(t.shape))
            )  # back to the model's shape
            given = out.get(name) if out is not None else None
            if given is not None and given.data_ptr() == t.data_ptr() and given.shape == t.shape:
                tensors[name] = given  # read in place
            elif given is not None and given.shape == t.shape:
                given.copy_(t)
                tensors[name] = given
        return tensors, got

    def write_policy(
        self, shards: Mapping[str, torch.Tensor], group: dist.ProcessGroup | None
    ) -> int:
        """The trainer's fp32 shards, cast to the stored dtype (bf16 on GPU clusters), as the next
        policy version (returned); collective."""
        return self.store.write(
            "policy", self._policy_shards(), self._cast("policy", shards), group
        )
