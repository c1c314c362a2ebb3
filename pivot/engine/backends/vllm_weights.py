"""How a GPS Read reaches a vLLM engine's worker processes: a safetensors file in host shared
memory that the Read fills in place, mapped by vLLM's workers, whose loaders read their TP
slices of it in place (`map_safetensors`).

vLLM runs its model in its own processes (one engine core per replica; under TP one worker per
device). Its `collective_rpc` would pickle tensors through ZMQ; instead the replica's leader
keeps one file per engine in /dev/shm, laid out as a safetensors file (an 8-byte header length,
a JSON header, then every tensor's bytes), maps its data section, and hands the tensors' views to
the GPS Read as the buffers to fill (`VllmEngine.weight_buffers`): the Read's one copy lands
where the workers read it, and the RPC carries only the path.

`PivotWorkerExtension` is vLLM's `worker_extension_cls` (mixed into each worker): it reloads the
weights in place with vLLM's own `reload_weights` (vllm/model_executor/model_loader/reload/
inplace.py:32), and repairs a vLLM 0.32 defect with tied embeddings: after a reload the CPU
backend's packed copy of `lm_head` still holds the old embedding (reload/layerwise.py:255-267
reloads the embedding, vocab_parallel_embedding.py:67-70 packs the head once), so the head's
`process_weights_after_loading` is run again. This module imports no vLLM: the worker side runs
inside vLLM's processes, the file side in Pivot's.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from pivot.model.hf_folder import SAFETENSORS_DTYPES

DTYPE_CODES = {dtype: code for code, dtype in SAFETENSORS_DTYPES.items()}
"""torch dtype -> the code a safetensors header names it by."""


class ShmSafetensors:
    """A safetensors file in shared memory whose tensors are writable views of its data."""

    def __init__(
        self,
        path: str | Path,
        specs: Mapping[str, tuple[tuple[int, ...], torch.dtype]],
        file_names: Mapping[str, str] | None = None,
    ):
        """`file_names`: a tensor's name in the file's header where it differs from its name in
        `specs` and `tensors` (the checkpoint's own names, which vLLM's loaders map)."""
        self.path = Path(path)
        header: dict[str, Any] = {}
        offset = 0
        for name, (shape, dtype) in specs.items():
            nbytes = torch.Size(shape).numel() * torch.empty((), dtype=dtype).element_size()
            header[(file_names or {}).get(name, name)] = {
                "dtype": DTYPE_CODES[dtype],
                "shape": list(shape),
                "data_offsets": [offset, offset + nbytes],
            }
            offset += nbytes
        raw = json.dumps(header, separators=(",", ":")).encode()
        raw += b" " * (-(8 + len(raw)) % 64)  # data starts 64-byte aligned: every view is aligned
        start = 8 + len(raw)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
        # a process that ends without close() still removes its file (not one SIGKILLed)
        self._unlink = weakref.finalize(self, _unlink, str(self.path))
        try:
            os.ftruncate(fd, start + max(offset, 1))
            self._map = mmap.mmap(fd, start + max(offset, 1))
        finally:
            os.close(fd)
        self._map[:8] = struct.pack("<Q", len(raw))
        self._map[8:start] = raw
        data = torch.frombuffer(self._map, dtype=torch.uint8, offset=start, count=offset)
        spans = [h["data_offsets"] for h in header.values()]
        self.tensors = {
            name: data[lo:hi].view(dtype).view(shape)
            for (name, (shape, dtype)), (lo, hi) in zip(specs.items(), spans)
        }

    def fill(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """Copy each tensor into its view unless it already is that view (the Read filled it)."""
        for name, t in tensors.items():
            view = self.tensors[name]
            if t.data_ptr() != view.data_ptr():
                view.copy_(t)

    def close(self) -> None:
        self.tensors = {}
        try:
            self._map.close()
        except BufferError:  # a view is still referenced somewhere: the unlink below still frees it
            pass
        self._unlink()


def _unlink(path: str) -> None:
    Path(path).unlink(missing_ok=True)


def shm_file(shm_dir: str | Path, key: str) -> Path:
    """This process's weight file named `key` in `shm_dir`, after removing those of processes
    that ended without removing theirs (SIGKILLed: a whole model's bytes each, in host memory)."""
    for f in Path(shm_dir).glob("pivot-vllm-*.safetensors"):
        pid = f.name.split("-")[2]
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:  # gone (a live process of another user answers PermissionError)
            f.unlink(missing_ok=True)
        except (ValueError, PermissionError):
            continue
    return Path(shm_dir) / f"pivot-vllm-{os.getpid()}-{key}.safetensors"


class PivotWorkerExtension:
    """Mixed into every vLLM worker (`worker_extension_cls`); called by `collective_rpc` name."""

    def pivot_load_weights(self, path: str, repair: bool = True) -> int:
        """Reload every weight from the safetensors file at `path`; returns how many.

        The tensors handed to vLLM's loaders are views of the file's mapping, not copies: each
        loader narrows its TP slice and copies that to the device (vllm/model_executor/layers/
        linear.py:576-593, ColumnParallelLinear.weight_loader; :1735-1743 for row-parallel), so a
        worker reads its slice of the host bytes, and a replica the model once, where copying each
        tensor out of the file (`safe_open(...).get_tensor`) made every worker read all of it
        (72B at TP 8: 8 x 145 GB)."""
        mapping, views = map_safetensors(path)
        try:
            self.reload_weights(weights_iterator=iter(views.items()))  # type: ignore[attr-defined]
        finally:
            count = len(views)
            del views
            try:
                mapping.close()
            except BufferError:  # a loader kept a view: the mapping goes with its last one
                pass
        model = self.model_runner.get_model()  # type: ignore[attr-defined]
        head = getattr(model, "lm_head", None)
        tied = getattr(getattr(model, "config", None), "tie_word_embeddings", False)
        if repair and tied and head is not None and hasattr(head, "quant_method"):
            head.quant_method.process_weights_after_loading(head)
        if repair:
            repack_cpu_experts(model)
        return count


def map_safetensors(path: str | Path) -> tuple[mmap.mmap, dict[str, torch.Tensor]]:
    """Every tensor of the safetensors file at `path` as a view of one private mapping of it
    (copy-on-write: a write through a view never reaches the file); nothing is read until a view
    is. The caller closes the mapping once the views are gone."""
    with open(path, "rb") as f:
        mapping = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    (length,) = struct.unpack("<Q", mapping[:8])
    header = json.loads(mapping[8 : 8 + length])
    header.pop("__metadata__", None)
    start = 8 + length
    data = torch.frombuffer(mapping, dtype=torch.uint8, offset=start, count=len(mapping) - start)
    views = {
        name: data[lo:hi].view(SAFETENSORS_DTYPES[h["dtype"]]).view(h["shape"])
        for name, h in header.items()
        for lo, hi in [h["data_offsets"]]
    }
    return mapping, views


def repack_cpu_experts(model: torch.nn.Module) -> int:
    """Prepack again every MoE layer's experts for vLLM's CPU grouped GEMM; returns how many.

    vLLM 0.32 prepacks a layer's `w13_weight` / `w2_weight` for the CPU kernel once, when its
    MoE kernel is first set up (fused_moe/experts/cpu_moe.py:211-220); a reload copies the
    checkpoint's plain layout into that storage and skips the prepack, since the kernel already
    exists (fused_moe/unquantized_fused_moe_method.py:180-203), so the kernel reads plain weights
    as packed ones. On CUDA the kernels read the parameters as loaded: nothing to do there."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return 0
    n = 0
    for module in model.modules():
        kernel = getattr(getattr(module, "quant_method", None), "moe_kernel", None)
        experts = getattr(kernel, "fused_experts", None)
        if experts is not None and hasattr(module, "w13_weight"):
            experts.process_weights_after_loading(module)
            n += 1
    return n
