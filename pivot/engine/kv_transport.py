"""How a migrated sequence's KV slice gets from the rank that exported it to the rank that
imports it: the handle says where the KV lives, the destination picks the transport.

A source rank always writes its slice to its host's shared memory (`{path}_r{rank}`,
safetensors). Beside that file it may offer two more ways in, recorded on the `KVHandle`:

- `nixl_key`: with several hosts the rank serves the file's mapping through GPS's NIXL agent
  (pivot/gps/nixl_link.py, the one GPS's remote Reads use: no second transport), published
  under `{nixl_key}_r{rank}` in the job's store. A destination on another host READs the bytes
  one-sidedly over UCX and marks the key done; the source then unmaps and removes the file.
- `cuda_ipc`: on CUDA the rank also keeps a device copy of the slice and records its CUDA IPC
  handle in `{path}_r{rank}.cuda` (typed MessagePack, not a pickle). A destination on the same
  host and on CUDA opens it and copies device to device instead of through host memory.
  CUDA only: it cannot run on the CPU machines the tests use (its selection logic is tested).

`choose` is the destination's pick, cheapest first: `cuda` (same host, both ends on CUDA, the
record present), `shm` (same host, the file present), `nixl` (another host, served, and this
rank has a NIXL link), else None: the KV is refused as "unreachable" and re-prefilled.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load, load_file

from pivot.engine.sequence import KVHandle

if TYPE_CHECKING:
    from pivot.gps.nixl_link import NixlLink

TRANSPORTS = ("cuda", "shm", "nixl")


@dataclass
class KVPlace:
    """Where an engine's rank is: its host id (`ClusterSpec.host`; one machine may play several
    hosts), whether its cache is on CUDA, and its NIXL link (GPS's, None on one host)."""

    host: int = 0
    cuda: bool = False
    link: NixlLink | None = None


@dataclass
class CudaSlice:
    """A device copy's CUDA IPC record: `UntypedStorage._share_cuda_()`'s fields per tensor
    (typed MessagePack: msgspec checks a dataclass's field types on decode as a Struct's)."""

    names: list[str]
    shapes: list[list[int]]
    dtypes: list[str]
    shares: list[tuple[int, bytes, int, int, bytes, int, bytes, bool]]


@cache
def _cuda_codec() -> tuple[Any, Any]:
    """(encoder, CudaSlice decoder). msgspec is imported on first use, not with the engine:
    an engine without KV migration runs where msgspec is not installed (the GPU test image)."""
    import msgspec

    return msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder(CudaSlice)


def rank_path(path: str, rank: int) -> str:
    return f"{path}_r{rank}"


def choose(handle: KVHandle, rank: int, here: KVPlace) -> str | None:
    """The transport this rank uses to read `handle`'s slice of rank `rank`, or None."""
    file = rank_path(handle.path, rank)
    if handle.host == here.host:
        if handle.cuda_ipc and here.cuda and os.path.exists(file + ".cuda"):
            return "cuda"
        return "shm" if os.path.exists(file) else None
    if handle.nixl_key and here.link is not None:
        return "nixl"
    return None


def reachable(handle: KVHandle, here: KVPlace) -> bool:
    """Every rank's slice of `handle` can be read from here (the leader checks for the group:
    ranks of one replica share a host in every layout Pivot builds)."""
    return all(choose(handle, r, here) is not None for r in range(handle.tp_size))


def fetch(
    handle: KVHandle, rank: int, here: KVPlace, device: torch.device
) -> dict[str, torch.Tensor]:
    """Rank `rank`'s slice of `handle` as named tensors (on `device` for `cuda`, else on CPU);
    what the source left for it is consumed (file removed, NIXL key marked done)."""
    how = choose(handle, rank, here)
    file = rank_path(handle.path, rank)
    if how == "cuda":
        tensors = _open_cuda(file + ".cuda", device)
        for f in (file + ".cuda", file):
            _unlink(f)
        return tensors
    if how == "shm":
        tensors = load_file(file)
        _unlink(file)
        _unlink(file + ".cuda")
        return tensors
    if how == "nixl":
        assert here.link is not None
        key = rank_path(handle.nixl_key, rank)
        info = here.link.remote(key)
        buf = torch.empty(info.size, dtype=torch.uint8)
        here.link.register(buf)
        try:
            here.link.transfer("READ", buf, key, [(buf.data_ptr(), 0, info.size)])
        finally:
            here.link.unregister(buf)
            here.link.forget(key)
        here.link.kv.set(key + "/done", "1")  # the store keeps b"1" either way
        return load(buf.numpy().tobytes())
    raise RuntimeError(f"KV slice {file}: no transport reaches it from host {here.host}")


def release(handle: KVHandle, here: KVPlace) -> None:
    """Give up `handle` (refused): remove what this host can see, tell a remote source it may."""
    for r in range(handle.tp_size):
        file = rank_path(handle.path, r)
        if handle.host == here.host:
            _unlink(file)
            _unlink(file + ".cuda")
        elif handle.nixl_key and here.link is not None:
            here.link.kv.set(rank_path(handle.nixl_key, r) + "/done", "1")


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


# ---- the source's side -------------------------------------------------------------------
class Offers:
    """What one source rank keeps alive for its exported slices beyond the file: the NIXL-served
    mappings and the CUDA device copies, each dropped once its reader is done."""

    def __init__(self, here: KVPlace, nixl_prefix: str) -> None:
        self.here, self.nixl_prefix = here, nixl_prefix
        self._served: dict[str, tuple[str, torch.Tensor]] = {}  # key -> (file, mapping)
        self._device: dict[str, dict[str, torch.Tensor]] = {}  # file -> device copies

    @property
    def nixl(self) -> bool:
        return self.here.link is not None and bool(self.nixl_prefix)

    def offer(self, path: str, rank: int, tensors: dict[str, torch.Tensor]) -> None:
        """After `{path}_r{rank}` is written: serve it over NIXL, keep `tensors` (on the device)
        for CUDA IPC, as this rank can."""
        file = rank_path(path, rank)
        if self.nixl:
            assert self.here.link is not None
            size = os.path.getsize(file)
            mapping = torch.from_file(file, shared=True, size=size, dtype=torch.uint8)
            key = rank_path(self.nixl_key(path), rank)
            self.here.link.serve(key, mapping)
            self._served[key] = (file, mapping)
        if self.here.cuda and all(t.is_cuda for t in tensors.values()):
            self._device[file] = {k: t.clone() for k, t in tensors.items()}
            _write_cuda(file + ".cuda", self._device[file])

    def nixl_key(self, path: str) -> str:
        return f"{self.nixl_prefix}/{os.path.basename(path)}" if self.nixl else ""

    def collect(self) -> None:
        """Drop what readers are done with: a NIXL key marked done (the file goes too), a
        device copy whose record a same-host reader removed."""
        link = self.here.link
        for key, (file, mapping) in list(self._served.items()):
            if link is not None and (link.kv.check([key + "/done"]) or not os.path.exists(file)):
                link.unregister(mapping)
                del self._served[key]
                _unlink(file)
        for file in [f for f in self._device if not os.path.exists(f + ".cuda")]:
            del self._device[file]

    def close(self) -> None:
        link = self.here.link
        for _, mapping in self._served.values():
            if link is not None:
                link.unregister(mapping)
        self._served.clear()
        self._device.clear()


def _write_cuda(record: str, tensors: dict[str, torch.Tensor]) -> None:
    names = sorted(tensors)
    shares = [tuple(tensors[n].untyped_storage()._share_cuda_()) for n in names]
    rec = CudaSlice(
        names,
        [list(tensors[n].shape) for n in names],
        [str(tensors[n].dtype).removeprefix("torch.") for n in names],
        shares,
    )
    tmp = record + ".tmp"
    with open(tmp, "wb") as f:
        f.write(_cuda_codec()[0].encode(rec))
    os.replace(tmp, record)


def _open_cuda(record: str, device: torch.device) -> dict[str, torch.Tensor]:
    """The device copies a same-host source shares, copied onto this rank's `device` (one
    device-to-device copy each; the source frees its copy once the record is gone)."""
    with open(record, "rb") as f:
        rec = _cuda_codec()[1].decode(f.read())
    out = {}
    for name, shape, dtype, share in zip(rec.names, rec.shapes, rec.dtypes, rec.shares):
        storage = torch.UntypedStorage._new_shared_cuda(*share)
        t = torch.empty(0, dtype=getattr(torch, dtype), device=storage.device)
        t.set_(storage, 0, shape)  # type: ignore[call-overload]
        out[name] = t.to(device, copy=True)
    return out
