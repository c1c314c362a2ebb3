"""`HostBuffers`: which host this process is on, the per-host shm buffers of every registered
model (created by each host's local rank 0, served to other hosts over NIXL), their version
headers, and where a slice of a tensor lies in them. `GPSStore` (`pivot/gps/store.py`) holds one
and builds its Read and Write on it.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from pivot.gps.layout import Box, Layout, Place
from pivot.gps.runs import paired_runs, runs
from pivot.gps.shm import (
    HEADER_BYTES,
    HEADER_WORDS,
    W_PUB_SLOT,
    W_PUB_VERSION,
    SharedBuffer,
    shm_path,
)
from pivot.gps.shm_sweep import remove_namespaces
from pivot.gps.torch_specs import TORCH_DTYPES

if TYPE_CHECKING:
    from pivot.gps.nixl_link import NixlLink


@dataclass(frozen=True)
class HostInfo:
    """Which host this process is on. `host_of[r]` is the host of global rank r."""

    rank: int
    host: int
    local_rank: int
    host_of: tuple[int, ...]

    @staticmethod
    def from_env() -> HostInfo:
        """From torchrun's env: RANK, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, WORLD_SIZE."""
        world, local_world = int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_WORLD_SIZE"])
        return HostInfo(
            int(os.environ["RANK"]),
            int(os.environ["GROUP_RANK"]),
            int(os.environ["LOCAL_RANK"]),
            tuple(r // local_world for r in range(world)),
        )

    @property
    def place(self) -> Place:
        return Place(self.host, self.rank)


def narrow(t: torch.Tensor, box: Box, origin: Box) -> torch.Tensor:
    """`t` (whose box is `origin`) cut down to `box`: a view, narrowed only along cut dims."""
    for d, ((lo, hi), (o, _)) in enumerate(zip(box, origin)):
        if hi - lo != t.shape[d]:
            t = t.narrow(d, lo - o, hi - lo)
    return t


class HostBuffers:
    """The buffers, headers and slice addresses under `GPSStore`'s Read and Write."""

    def __init__(self, kv: dist.Store, info: HostInfo, namespace: str) -> None:
        self.kv, self.info, self.namespace = kv, info, namespace
        self.layouts: dict[str, Layout] = {}
        self.buffers: dict[str, SharedBuffer] = {}
        self._offsets: dict[tuple[str, int], dict[tuple[str, int], int]] = {}
        self._slot_bytes: dict[tuple[str, int], int] = {}
        self._link: NixlLink | None = None
        self._hdr = torch.zeros(HEADER_WORDS, dtype=torch.int64)  # staging for remote headers

    # setup ----------------------------------------------------------------------------------
    def key(self, model: str, host: int) -> str:
        """The name `host`'s buffer of `model` is served (and its readiness announced) under."""
        return f"{self.namespace}/{model}/h{host}"

    @property
    def link(self) -> NixlLink:
        """This rank's NIXL agent, made on first use (a single-host job never needs one)."""
        if self._link is None:
            from pivot.gps.nixl_link import NixlLink

            link = self._link = NixlLink(f"{self.namespace}-r{self.info.rank}", self.kv)
            link.register(self._hdr)
            return link
        return self._link

    def register(self, layout: Layout) -> None:
        """Adopt `layout` (a GPS host layout) for its model; local rank 0 creates the buffer.
        Once per model: a second call with the same layout is a no-op (no second mapping, no
        second page-locking, no zeroed header), with another layout an error."""
        model, host = layout.model, self.info.host
        if model in self.layouts:
            if self.layouts[model].signature != layout.signature:
                raise ValueError(f"GPS model {model!r} is already registered with another layout")
            return
        for p in layout.places:
            offsets, size = layout.packing(Place(p.host))
            self._offsets[(model, p.host)], self._slot_bytes[(model, p.host)] = offsets, size
        self.layouts[model] = layout
        if (model, host) not in self._slot_bytes:  # this host holds no share of the model
            return
        path = shm_path(self.namespace, host, model)
        size = self._slot_bytes[(model, host)]
        if self.info.local_rank == 0:
            buf = SharedBuffer(path, size, create=True)
            if len(set(self.info.host_of)) > 1:  # other hosts may read it over NIXL
                self.link.serve(self.key(model, host), buf.raw)
            self.kv.set(self.key(model, host) + "/ready", "1")  # the store keeps b"1" either way
        else:
            self.kv.wait([self.key(model, host) + "/ready"])
            buf = SharedBuffer(path, size, create=False)
        self.buffers[model] = buf

    def remove_files(self) -> None:
        """Local rank 0: unlink every file of this job attempt on this host, GPS's buffers and the
        K/V exports of migrating sequences (its job is ending in failure); safe in a signal
        handler. What other processes mapped stays theirs until they exit."""
        if self.info.local_rank == 0:
            remove_namespaces([self.namespace], self.info.host)

    def close(self) -> None:
        """Release memory registrations; local rank 0 removes its shm files."""
        for buf in self.buffers.values():
            buf.close(unlink=buf.owner)
        self.buffers.clear()
        if self._link is not None:
            self._link.close()

    # headers -----------------------------------------------------------------------------------
    def words(self, model: str, host: int) -> list[int]:
        """The version header of `host`'s buffer of `model` (a NIXL READ for another host)."""
        if host == self.info.host:
            return self.buffers[model].words()
        self.link.transfer(
            "READ", self._hdr, self.key(model, host), [(self._hdr.data_ptr(), 0, HEADER_WORDS * 8)]
        )
        return self._hdr.tolist()

    def set_words(self, model: str, host: int, words: list[int]) -> None:
        """Overwrite another host's version header of `model` (a NIXL WRITE)."""
        self._hdr.copy_(torch.tensor(words, dtype=torch.int64))
        self.link.transfer(
            "WRITE",
            self._hdr,
            self.key(model, host),
            [(self._hdr.data_ptr(), 0, HEADER_WORDS * 8)],
        )

    def latest(self, model: str) -> int | None:
        """The newest version published on this host, or None before the first Write."""
        words = self.words(model, min(p.host for p in self.layouts[model].places))
        return None if words[W_PUB_SLOT] < 0 else words[W_PUB_VERSION]

    # slice addressing -------------------------------------------------------------------------
    def host_view(self, model: str, host: int, slot: int, tensor: str, piece: int) -> torch.Tensor:
        """Piece `piece` of `tensor` in `slot` of this host's buffer of `model`: a view."""
        gps = self.layouts[model]
        spec, p = gps.spec(tensor), gps.pieces[tensor][piece]
        off = self._offsets[(model, host)][(tensor, piece)]
        nbytes = math.prod(p.shape) * spec.itemsize
        raw = self.buffers[model].slot(slot)[off : off + nbytes]
        return raw.view(TORCH_DTYPES[spec.dtype]).view(p.shape)

    def remote_runs(
        self,
        model: str,
        host: int,
        slot: int,
        tensor: str,
        src_piece: int,
        box: Box,
        local: torch.Tensor,
        local_origin: Box,
    ) -> list[tuple[int, int, int]]:
        """(local address, remote byte offset, bytes) runs moving `box` between a host buffer
        piece and the local tensor `local` (whose box is `local_origin`)."""
        gps = self.layouts[model]
        spec, p = gps.spec(tensor), gps.pieces[tensor][src_piece]
        item = spec.itemsize
        base = (
            HEADER_BYTES
            + slot * self._slot_bytes[(model, host)]
            + self._offsets[(model, host)][(tensor, src_piece)]
        )

        def rel(origin: Box) -> Box:
            return tuple((lo - o, hi - o) for (lo, hi), (o, _) in zip(box, origin))

        pairs = paired_runs(
            runs(p.shape, rel(p.box)),
            runs(tuple(b - a for a, b in local_origin), rel(local_origin)),
        )
        addr = local.data_ptr()
        return [(addr + d * item, base + s * item, n * item) for s, d, n in pairs]
