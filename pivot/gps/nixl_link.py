"""NIXL (UCX) point-to-point transfers between hosts, metadata exchanged through a c10d Store.

Each process owns one agent. A host's buffer is served by the agent of the process that created
it (local rank 0): it registers the shm mapping and publishes its agent metadata and descriptors
under a store key. Readers and writers on other hosts look the key up once, add the remote
agent, and post one-sided READ / WRITE transfers of (address, length) runs.

The store record is typed MessagePack decoded into `RemoteBuffer` (never a pickle), and with a
job secret (`PIVOT_JOB_SECRET`, which every multi-node run has) it carries an HMAC-SHA256 tag
bound to its key: a record planted by someone who can write to the store is refused instead of
pointing this job's weight transfers at a foreign agent.
"""

from __future__ import annotations

import hashlib
import hmac
import importlib
import time
from dataclasses import dataclass
from types import ModuleType
from typing import cast

import msgspec
import torch
import torch.distributed as dist

from pivot.secret import from_env


@dataclass(frozen=True)
class RemoteBuffer:
    """What a peer needs to reach a served buffer."""

    agent: str
    metadata: bytes
    addr: int
    size: int
    # No NIXL descriptor list: NIXL serializes those with pickle (nixl_cu12/_api.py 1.5.1,
    # get_serialized_descs / deserialize_descs, lines 1223 and 1234). `serve` registers the
    # buffer as one region, so (addr, size) says all a peer needs.


_MAGIC = b"PVN1"
_ENCODER = msgspec.msgpack.Encoder()
_DECODER = msgspec.msgpack.Decoder(RemoteBuffer)


def _tag(secret: bytes, key: str, payload: bytes) -> bytes:
    return hmac.digest(
        hmac.digest(secret, b"pivot-nixl-v1", hashlib.sha256),
        key.encode() + b"|" + payload,
        hashlib.sha256,
    )


def pack_remote(key: str, info: RemoteBuffer, secret: bytes | None) -> bytes:
    """The store value for `info` under `key`: magic, tag (empty without a secret), payload."""
    payload = _ENCODER.encode(info)
    return _MAGIC + (_tag(secret, key, payload) if secret else b"") + payload


def unpack_remote(key: str, raw: bytes, secret: bytes | None) -> RemoteBuffer:
    """The RemoteBuffer stored under `key`; a forged, foreign or malformed record raises ValueError."""
    if raw[:4] != _MAGIC:
        raise ValueError(f"NIXL: store record {key!r} is not a Pivot buffer record")
    body = raw[4:]
    if secret:
        tag, body = body[:32], body[32:]
        if not hmac.compare_digest(tag, _tag(secret, key, body)):
            raise ValueError(
                f"NIXL: store record {key!r} fails authentication (not written by this job)"
            )
    try:
        return _DECODER.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise ValueError(f"NIXL: malformed store record {key!r}: {e}") from None


def _mem_type(t: torch.Tensor) -> str:
    return "DRAM" if t.device.type == "cpu" else "VRAM"


def _dev_id(t: torch.Tensor) -> int:
    return 0 if t.device.type == "cpu" else t.device.index or 0


NIXL_MODULES = ("nixl", "nixl_cu13", "nixl_cu12")
"""Where NIXL's Python API lives, by wheel: `nixl` (source build), `nixl-cu13`, `nixl-cu12`."""


def nixl_api() -> ModuleType:
    """The `_api` module of whichever NIXL wheel is installed (the CUDA 13 and CUDA 12 wheels
    ship the same API under different top-level names)."""
    for name in NIXL_MODULES:
        try:
            return importlib.import_module(f"{name}._api")
        except ModuleNotFoundError as e:
            if e.name not in (name, f"{name}._api"):  # the wheel is there but broken: say so
                raise
    raise ModuleNotFoundError(
        "NIXL is needed for GPS transfers between hosts: pip install nixl-cu13 (CUDA 13) or nixl-cu12 (CUDA 12)"
    )


class NixlLink:
    """One process's NIXL agent."""

    def __init__(self, name: str, kv: dist.Store, timeout_s: float = 60.0) -> None:
        api = nixl_api()  # heavy; only when remote is used
        self.name = name
        self.kv = kv
        self.timeout_s = timeout_s
        self.secret = from_env()
        self.agent = api.nixl_agent(name, api.nixl_agent_config(backends=["UCX"]))
        self._peers: dict[str, str] = {}
        self._meta: dict[str, bytes] = {}  # each peer's metadata as last loaded
        self._remote: dict[str, RemoteBuffer] = {}
        self._regs: dict[tuple[int, int], object] = {}

    # registration ------------------------------------------------------------------------
    def register(self, t: torch.Tensor) -> None:
        """Register `t`'s memory once (cached by address and size)."""
        key = (t.data_ptr(), t.numel() * t.element_size())
        if key not in self._regs:
            self._regs[key] = self.agent.register_memory(t.reshape(-1).view(torch.uint8))

    def serve(self, key: str, buf: torch.Tensor) -> None:
        """Register `buf` and publish how to reach it under store key `key`."""
        self.register(buf)
        info = RemoteBuffer(
            self.name,
            self.agent.get_agent_metadata(),
            buf.data_ptr(),
            buf.numel() * buf.element_size(),
        )
        # torch's stub types Store.set's value as str; the binding takes bytes and stores them as is
        self.kv.set(key, cast(str, pack_remote(key, info, self.secret)))

    def remote(self, key: str) -> RemoteBuffer:
        info = self._remote.get(key)
        if info is None:
            info = self._remote[key] = unpack_remote(key, self.kv.get(key), self.secret)
            # a peer that registered memory since we loaded its metadata (a KV export serves a
            # new buffer per slice, pivot/engine/kv_transport.py) is reloaded: NIXL would not
            # find the new region otherwise (NIXL_ERR_NOT_FOUND at initialize_xfer)
            if self._meta.get(info.agent) != info.metadata:
                self._peers[info.agent] = self.agent.add_remote_agent(info.metadata)
                self._meta[info.agent] = info.metadata
        return info

    def forget(self, key: str) -> None:
        """Drop the cached record of a one-shot buffer (a KV slice read once)."""
        self._remote.pop(key, None)

    # transfers ---------------------------------------------------------------------------
    def unregister(self, t: torch.Tensor) -> None:
        reg = self._regs.pop((t.data_ptr(), t.numel() * t.element_size()), None)
        if reg is not None:
            self.agent.deregister_memory(reg)

    def transfer(
        self, op: str, like: torch.Tensor, key: str, pieces: list[tuple[int, int, int]]
    ) -> None:
        """`op` "READ" (remote -> local) or "WRITE" (local -> remote) of byte runs
        (local address, remote offset, length); local memory (on `like`'s device) must be
        registered."""
        if not pieces:
            return
        info = self.remote(key)
        base, mem, dev = 0, _mem_type(like), _dev_id(like)
        for _, ro, n in pieces:
            if ro + n > info.size:
                raise ValueError(f"NIXL {op}: remote range [{ro}, {ro + n}) outside buffer {key!r}")
        local_d = self.agent.get_xfer_descs([(base + lo, n, dev) for lo, _, n in pieces], mem)
        remote_d = self.agent.get_xfer_descs(
            [(info.addr + ro, n, 0) for _, ro, n in pieces], "DRAM"
        )
        handle = self.agent.initialize_xfer(op, local_d, remote_d, self._peers[info.agent])
        try:
            state = self.agent.transfer(handle)
            deadline = time.monotonic() + self.timeout_s
            while state != "DONE":
                if state == "ERR" or time.monotonic() > deadline:
                    raise RuntimeError(f"NIXL {op} with {info.agent} for {key!r} failed ({state})")
                state = self.agent.check_xfer_state(handle)
        finally:
            self.agent.release_xfer_handle(handle)

    def close(self) -> None:
        for reg in self._regs.values():
            self.agent.deregister_memory(reg)
        self._regs.clear()
        for peer in self._peers.values():
            self.agent.remove_remote_agent(peer)
        self._peers.clear()
        self._meta.clear()
