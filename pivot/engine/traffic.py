"""What a step moves, counted at the dispatcher: bytes each operator creates, reads and writes,
kernels launched and host-to-device bytes, exactly, on any device (meta tensors included, so a
hub-sized step is counted without its memory).

A GPU step's time is bounded below by the bytes it moves through HBM; a path that copies K/V out
of the cache, or pads, shows here as bytes created and read beyond the floor (weights + live K/V
read once), whatever the device the count runs on. `TrafficCounter` is a `TorchDispatchMode`:
every aten operator below autograd passes through it with its real tensors.

Rules (per operator; a view or alias moves nothing and launches nothing):
- created: the bytes of each output whose storage is not one of the inputs' (a new tensor);
- read: an indexing read (`index_select`, `embedding`, `index`, `gather`) reads the rows it
  picks (its output's bytes) and its index; an indexed write (`index_copy_`, `index_put_`, ...)
  and `copy_` read their source; any other operator reads each distinct input it is given, over
  the elements its strides reach (a broadcast input once);
- written: each output's bytes (an in-place operator: the bytes it stores);
- host syncs: `item` of a device tensor and copies from a device to the CPU; host-to-device
  bytes: copies the other way;
- FlexAttention (the higher-order operator) by its kernel's contract: the queries, and each K/V
  block its block mask lists, once per K/V head (torch's flex decoding kernel serves the query
  heads sharing a K/V head together: torch/_inductor/kernel/flex/flex_decoding.py reshapes the
  query by `gqa_shared_heads`); it creates and writes only its output. That the compiled kernel
  allocates nothing else is checked on its generated code (tests/engine/test_flex.py). Under
  this mode the operator is counted, not run: its output is zeros, so a counted step's results
  are not to be used (running its unfused eager reference here left dynamo unable to compile
  flex_attention afterwards, in torch 2.13).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.attention.flex_attention as flex_module
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

INDEX_READS = {"index_select", "embedding", "index", "gather"}
INDEX_WRITES = {"index_copy", "index_put", "_index_put_impl", "index_add", "scatter", "copy"}
ALLOCATIONS = {"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided"}


def reach(t: torch.Tensor) -> int:
    """Bytes a kernel reading `t` touches: its elements along every non-broadcast dimension."""
    n = math.prod(s for s, st in zip(t.shape, t.stride()) if st != 0) if t.dim() else 1
    return n * t.element_size()


def _storage_key(t: torch.Tensor) -> tuple[int, str]:
    if t.device.type == "meta":
        return (id(t), "meta")  # meta tensors have no storage to compare: each is its own
    return (t.untyped_storage().data_ptr(), t.device.type)


@dataclass
class Traffic:
    """Totals of one counted region, and the bytes read per operator name."""

    created: int = 0
    read: int = 0
    written: int = 0
    launches: int = 0
    h2d: int = 0
    syncs: int = 0
    """Reads of device values by the host (`item`, a copy to the CPU): each waits for the device.
    Seen only where the device is not the CPU (CUDA, or meta in a count)."""
    flex_kv_read: int = 0
    """Of `read`, the K/V bytes FlexAttention's block masks send it to (0 for masks on the meta
    device, whose values are unknown: a caller that built them adds `flex_calls` x the blocks it
    listed x `flex_block_bytes`)."""
    flex_calls: int = 0
    flex_block_bytes: int = 0
    """K and V bytes of one cache block over every K/V head."""
    read_by_op: Counter[str] = field(default_factory=Counter)
    created_by_op: Counter[str] = field(default_factory=Counter)


class TrafficCounter(TorchDispatchMode):
    """`with TrafficCounter() as c: step()`; then `c.traffic`."""

    supports_higher_order_operators = True

    def __init__(self) -> None:
        super().__init__()
        self.traffic = Traffic()
        self._depth = 0
        self._saved: tuple[bool, Any] = (False, None)

    def __enter__(self) -> TrafficCounter:
        # flex_attention calls its operator through a fullgraph torch.compile (backend "eager"),
        # which refuses to run under a dispatch mode; torch's debug switch calls it directly. It
        # also refuses meta tensors up front; here the operator itself answers them (`_flex`).
        # Set once for the outermost entry (torch re-enters a mode while it dispatches).
        self._depth += 1
        if self._depth == 1:
            self._saved = (
                flex_module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG,
                flex_module._validate_device,
            )
            flex_module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG = True
            flex_module._validate_device = _meta_or(self._saved[1])
        super().__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self._depth -= 1
        if self._depth == 0:
            flex_module._FLEX_ATTENTION_DISABLE_COMPILE_DEBUG, flex_module._validate_device = (
                self._saved
            )

    def __torch_dispatch__(
        self,
        func: Any,
        types: Any,
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if isinstance(func, torch._ops.HigherOrderOperator):
            if func.name() == "flex_attention":
                return self._flex(func, args, kwargs)
            return NotImplemented
        out = func(*args, **kwargs)
        name = func.overloadpacket.__name__.rstrip("_")
        if getattr(func, "is_view", False) or name in ("view", "_unsafe_view", "alias", "detach"):
            return out
        inputs = [a for a in tree_flatten((args, kwargs))[0] if isinstance(a, torch.Tensor)]
        outputs = [o for o in tree_flatten(out)[0] if isinstance(o, torch.Tensor)]
        in_keys = {_storage_key(t) for t in inputs}
        t = self.traffic
        fresh = [o for o in outputs if _storage_key(o) not in in_keys]
        created = sum(o.numel() * o.element_size() for o in fresh)
        t.created += created
        t.created_by_op[name] += created
        if name in ALLOCATIONS:
            return out
        t.launches += 1
        if name in INDEX_READS:
            read = sum(o.numel() * o.element_size() for o in outputs)
            read += sum(reach(a) for a in inputs if not a.is_floating_point())
        elif name in INDEX_WRITES:
            sources = [a for a in inputs[1:]]  # the destination is the first
            read = sum(reach(a) for a in sources)
            if name == "copy" and inputs and inputs[0].device != inputs[-1].device:
                t.h2d += reach(inputs[-1]) if inputs[-1].device.type == "cpu" else 0
        else:
            seen: set[tuple[int, str, int | torch.SymInt]] = set()
            read = 0
            for a in inputs:
                key = (*_storage_key(a), a.storage_offset())
                if key not in seen:
                    seen.add(key)
                    read += reach(a)
        if name == "_to_copy" and inputs and outputs:
            src, dst = inputs[0].device.type, outputs[0].device.type
            if src == "cpu" and dst != "cpu":
                t.h2d += reach(inputs[0])
            t.syncs += src != "cpu" and dst == "cpu"
        if name == "_local_scalar_dense" and inputs and inputs[0].device.type != "cpu":
            t.syncs += 1
        if name == "copy" and len(inputs) > 1:
            t.syncs += inputs[0].device.type == "cpu" and inputs[1].device.type != "cpu"
        t.read += read
        t.read_by_op[name] += read
        mutated = outputs if fresh else outputs[:1]
        t.written += sum(o.numel() * o.element_size() for o in mutated)
        return out

    def _flex(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        query, key, value, _score, mask = args[:5]
        kv_num, full_num = mask[2], mask[4]
        kv_block = mask[-2]
        t = self.traffic
        t.launches += 1
        t.flex_calls += 1
        per_block = kv_block * key.shape[1] * key.shape[-1] * key.element_size()
        t.flex_block_bytes = per_block * 2
        if kv_num.device.type == "meta":  # the mask's values are unknown: the caller adds them
            visited = 0
        else:
            visited = int(kv_num.sum()) + (int(full_num.sum()) if full_num is not None else 0)
        kv_bytes = 2 * visited * per_block
        t.flex_kv_read += kv_bytes
        t.read += kv_bytes + reach(query)
        t.read_by_op["flex_attention"] += kv_bytes + reach(query)
        b, hq, lq = query.shape[:3]
        out_bytes = b * hq * lq * value.shape[-1] * query.element_size()
        t.created += out_bytes
        t.created_by_op["flex_attention"] += out_bytes
        t.written += out_bytes
        out = query.new_zeros(b, hq, lq, value.shape[-1])
        lse = query.new_zeros(b, hq, lq, dtype=torch.float32)
        return out, lse, lse


def _meta_or(validate: Any) -> Any:
    def check(query: torch.Tensor, *rest: torch.Tensor) -> None:
        if query.device.type != "meta":
            validate(query, *rest)

    return check
