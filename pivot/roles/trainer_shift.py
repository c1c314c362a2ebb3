"""The trainer's shift down and up (a mixin of `pivot.roles.trainer.Trainer`): optimizer state,
fp32 master shards and the KL reference's shards offloaded to host memory byte for byte (pinned
on CUDA) and their device storage freed; restored on shift up, so training continues bit-exactly.
Parameters come back from the host master or, when it was not kept, from the GPS Read."""

from __future__ import annotations

from typing import Any

import torch

from pivot.model.tp_plan import fsdp_range


class TrainerShift:
    """Needs the trainer's `params`, `aliases`, `optimizer`, `reference`, `device`, `rank`, `world`."""

    params: dict[str, Any]
    aliases: set[str]
    optimizer: torch.optim.Optimizer
    reference: Any
    device: torch.device
    rank: int
    world: int
    _host: dict[str, list[torch.Tensor]] | None

    def _storages(self, which: str) -> list[torch.UntypedStorage]:
        if which == "master":
            tensors = [p.to_local() for p in self.params.values()]
        elif which == "reference":
            params = self.reference.parameters() if self.reference is not None else []
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
        """Offload optimizer state (and the fp32 master shards unless `keep_master=False`) to
        host memory and free the device storage of both. Local: no collective."""
        if self._host is not None:
            raise RuntimeError("trainer is already shifted down")
        self.optimizer.zero_grad(set_to_none=True)
        pin = self.device.type == "cuda"
        self._host = {"master": [], "optim": [], "reference": []}
        self._freed: dict[str, list[tuple[torch.UntypedStorage, int]]] = {}
        for which in ("master", "optim", "reference"):
            freed = []
            for st in self._storages(which):
                if which != "master" or keep_master:
                    host = torch.empty(st.nbytes(), dtype=torch.uint8, pin_memory=pin)
                    host.untyped_storage().copy_(st)
                    self._host[which].append(host)
                freed.append((st, st.nbytes()))
                st.resize_(0)
            self._freed[which] = freed
        self._kept_master = keep_master
        if (
            self.device.type == "cuda"
        ):  # hand the freed blocks back to the driver: torch's allocator
            torch.cuda.empty_cache()  # would keep them cached, out of reach of an sglang process here

    def shift_up(self, params: dict[str, torch.Tensor] | None = None) -> None:
        """Re-allocate and restore the offloaded state; parameters come from the host master or,
        if it was not kept, from `params` (full HF tensors or this rank's shards). Local."""
        if self._host is None:
            raise RuntimeError("trainer is not shifted down")
        if params is not None:
            params = self._shards_from(params)
        elif not self._kept_master:
            raise ValueError("shift_up needs params: the master weights were not kept on host")
        for which in ("master", "optim", "reference"):
            hosts = self._host[which]
            for k, (st, nbytes) in enumerate(self._freed[which]):
                st.resize_(nbytes)
                if which != "master" or self._kept_master:
                    st.copy_(hosts[k].untyped_storage())
        if not self._kept_master:
            with torch.no_grad():
                for name, p in self.params.items():
                    p.to_local().copy_(params[name])  # type: ignore[index]
        self._host = None

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
        if self._host is not None:
            raise RuntimeError("trainer is shifted down; call shift_up first")
