"""GPS store: host-memory copies of every model, Read / Write by re-partitioning, never torn.

Each host keeps one double-buffered shm file per model (created by its local rank 0). A Read
pulls this rank's atomic slices: a copy out of the shared buffer when the holder is this host,
a NIXL READ when it is another host. A Write pushes the writer's slices the same way into the
unpublished slot of every host; the version is published only after every host's copy is done.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import torch
import torch.distributed as dist

from pivot.gps.layout import Box, Layout, Place
from pivot.gps.runs import paired_runs, runs
from pivot.gps.shm import (
    HEADER_BYTES,
    HEADER_WORDS,
    W_PUB_SLOT,
    W_PUB_VERSION,
    W_SEQ,
    SharedBuffer,
    header_values_after_begin,
    header_values_after_publish,
    readable,
    shm_path,
)
from pivot.gps.shm_sweep import remove_namespaces
from pivot.gps.torch_specs import DTYPE_NAMES, TORCH_DTYPES
from pivot.gps.transfer_plan import LinkProfile, PlanCache


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


def _narrow(t: torch.Tensor, box: Box, origin: Box) -> torch.Tensor:
    for d, ((lo, hi), (o, _)) in enumerate(zip(box, origin)):
        if hi - lo != t.shape[d]:
            t = t.narrow(d, lo - o, hi - lo)
    return t


class GPSStore:
    """This process's handle on GPS. All ranks of a job construct one (same kv store, same
    namespace) and `register` every model; Reads are per rank, Writes collective over the
    writers' process group."""

    def __init__(
        self,
        kv: dist.Store,
        info: HostInfo,
        namespace: str = "pivot_gps",
        profile: LinkProfile = LinkProfile(),
        retry_timeout_s: float = 30.0,
        local_first: bool = True,
    ) -> None:
        self.kv, self.info, self.namespace = kv, info, namespace
        self.plans = PlanCache(profile, local_first)
        self.last_remote_bytes = 0  # of the latest `read`: what crossed hosts (the shift-up record)
        self.retry_timeout_s = retry_timeout_s
        self.layouts: dict[str, Layout] = {}
        self.buffers: dict[str, SharedBuffer] = {}
        self._offsets: dict[tuple[str, int], dict[tuple[str, int], int]] = {}
        self._slot_bytes: dict[tuple[str, int], int] = {}
        self._link = None
        self._hdr = torch.zeros(HEADER_WORDS, dtype=torch.int64)  # staging for remote headers

    # setup ----------------------------------------------------------------------------------
    def _key(self, model: str, host: int) -> str:
        return f"{self.namespace}/{model}/h{host}"

    @property
    def link(self):
        if self._link is None:
            from pivot.gps.nixl_link import NixlLink

            self._link = NixlLink(f"{self.namespace}-r{self.info.rank}", self.kv)
            self._link.register(self._hdr)
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
                self.link.serve(self._key(model, host), buf.raw)
            self.kv.set(self._key(model, host) + "/ready", b"1")
        else:
            self.kv.wait([self._key(model, host) + "/ready"])
            buf = SharedBuffer(path, size, create=False)
        self.buffers[model] = buf

    def remove_files(self) -> None:
        """Local rank 0: unlink every file of this job attempt on this host, GPS's buffers and the
        K/V exports of migrating sequences (its job is ending in failure); safe in a signal
        handler. What other processes mapped stays theirs until they exit."""
        if self.info.local_rank == 0:
            remove_namespaces([self.namespace], self.info.host)

    @contextlib.contextmanager
    def removed_on_failure(self) -> Iterator[None]:
        """Unlink this process's shm files when the block raises: the job is ending."""
        try:
            yield
        except BaseException:
            self.remove_files()
            raise

    def close(self) -> None:
        """Release memory registrations; local rank 0 removes its shm files."""
        for buf in self.buffers.values():
            buf.close(unlink=buf.owner)
        self.buffers.clear()
        if self._link is not None:
            self._link.close()

    # headers -----------------------------------------------------------------------------------
    def _words(self, model: str, host: int) -> list[int]:
        if host == self.info.host:
            return self.buffers[model].words()
        self.link.transfer(
            "READ", self._hdr, self._key(model, host), [(self._hdr.data_ptr(), 0, HEADER_WORDS * 8)]
        )
        return self._hdr.tolist()

    def _set_words(self, model: str, host: int, words: list[int]) -> None:
        self._hdr.copy_(torch.tensor(words, dtype=torch.int64))
        self.link.transfer(
            "WRITE",
            self._hdr,
            self._key(model, host),
            [(self._hdr.data_ptr(), 0, HEADER_WORDS * 8)],
        )

    def latest(self, model: str) -> int | None:
        """The newest version published on this host, or None before the first Write."""
        words = self._words(model, min(p.host for p in self.layouts[model].places))
        return None if words[W_PUB_SLOT] < 0 else words[W_PUB_VERSION]

    # slice addressing -------------------------------------------------------------------------
    def _host_view(self, model: str, host: int, slot: int, tensor: str, piece: int) -> torch.Tensor:
        gps = self.layouts[model]
        spec, p = gps.spec(tensor), gps.pieces[tensor][piece]
        off = self._offsets[(model, host)][(tensor, piece)]
        nbytes = math.prod(p.shape) * spec.itemsize
        raw = self.buffers[model].slot(slot)[off : off + nbytes]
        return raw.view(TORCH_DTYPES[spec.dtype]).view(p.shape)

    def _remote_runs(
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

    # Read -------------------------------------------------------------------------------------
    def read(
        self,
        model: str,
        layout: Layout,
        version: int | None = None,
        out: Mapping[str, torch.Tensor] | None = None,
        device: torch.device | str = "cpu",
    ) -> tuple[dict[str, torch.Tensor], int]:
        """This rank's tensors of `model` under `layout`, all from one version (the latest if
        None). `out` (from an earlier read) is filled in place, avoiding fresh-page faults."""
        me = self.info.place
        gps = self.layouts[model]
        plan = self.plans.get(gps, layout)
        transfers = plan.for_receiver(me)
        mine = {name: (j, p) for name, j, p in layout.held_by(me)}
        outputs = (
            dict(out)
            if out is not None
            else {
                name: torch.empty(
                    p.shape, dtype=TORCH_DTYPES[layout.spec(name).dtype], device=device
                )
                for name, (j, p) in mine.items()
            }
        )
        hosts = sorted({t.src.host for t in transfers})
        remote = [h for h in hosts if h != self.info.host]
        self.last_remote_bytes = sum(
            plan.slices[t.slice].nbytes for t in transfers if t.src.host != self.info.host
        )
        if remote:  # register is idempotent: once per tensor
            for t in outputs.values():
                self.link.register(t)
        try:
            return self._read_stable(model, layout, version, plan, transfers, outputs, hosts)
        finally:
            if out is None and remote:  # fresh outputs: leave no stale registrations behind
                for t in outputs.values():
                    self.link.unregister(t)

    def _read_stable(
        self,
        model: str,
        layout: Layout,
        version: int | None,
        plan,
        transfers,
        outputs: dict[str, torch.Tensor],
        hosts: list[int],
    ) -> tuple[dict[str, torch.Tensor], int]:
        """Seqlock loop: copy, and keep the copy only if no involved slot changed meanwhile."""
        deadline = time.monotonic() + self.retry_timeout_s
        while True:
            before = {h: self._words(model, h) for h in hosts}
            if not hosts:
                return outputs, version if version is not None else (self.latest(model) or 0)
            published = [w[W_PUB_VERSION] for w in before.values() if w[W_PUB_SLOT] >= 0]
            if not published:
                raise LookupError(f"GPS model {model!r}: nothing published yet")
            ver = max(published) if version is None else version
            if version is not None and max(published) >= version + 2:
                raise LookupError(
                    f"GPS model {model!r}: version {version} was overwritten "
                    f"(latest {max(published)})"
                )
            slot = ver % 2
            if all(readable(w, slot, ver) for w in before.values()):
                self._copy_in(model, slot, plan, transfers, outputs, layout)
                after = {h: self._words(model, h) for h in hosts}
                if all(after[h][W_SEQ[slot]] == before[h][W_SEQ[slot]] for h in hosts):
                    return outputs, ver
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"GPS model {model!r}: no stable copy of version {ver} "
                    f"within {self.retry_timeout_s}s"
                )
            time.sleep(0.0005)

    def _copy_in(self, model: str, slot: int, plan, transfers, outputs, layout: Layout) -> None:
        pending: dict[int, list[tuple[int, int, int]]] = {}
        any_out = next(iter(outputs.values()))
        for t in transfers:
            s = plan.slices[t.slice]
            dst_piece = layout.pieces[s.tensor][s.dst_piece]
            out = outputs[s.tensor]
            if t.src.host == self.info.host:
                src_piece = self.layouts[model].pieces[s.tensor][s.src_piece]
                src = _narrow(
                    self._host_view(model, t.src.host, slot, s.tensor, s.src_piece),
                    s.box,
                    src_piece.box,
                )
                _narrow(out, s.box, dst_piece.box).copy_(src, non_blocking=out.is_cuda)
            else:
                pending.setdefault(t.src.host, []).extend(
                    self._remote_runs(
                        model, t.src.host, slot, s.tensor, s.src_piece, s.box, out, dst_piece.box
                    )
                )
        for host, pieces in pending.items():
            self.link.transfer("READ", any_out, self._key(model, host), pieces)
        if any_out.is_cuda:
            torch.cuda.synchronize(any_out.device)

    # Write ------------------------------------------------------------------------------------
    def write(
        self,
        model: str,
        layout: Layout,
        shards: Mapping[str, torch.Tensor],
        group: dist.ProcessGroup | None = None,
    ) -> int:
        """Commit this writer's `shards` (its pieces under `layout`); collective over `group`
        (None: this rank is the only writer). Returns the published version."""
        me = self.info.place
        gps = self.layouts[model]
        problem = self._check_shards(model, layout, shards)
        pub = self._words(model, min(p.host for p in gps.places))[W_PUB_VERSION]
        flags = torch.tensor([1 if problem else 0, pub], dtype=torch.int64)
        if group is not None:
            dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=group)
        if flags[0]:
            raise ValueError(
                problem or f"GPS write of model {model!r}: another writer rejected its shards"
            )
        version = int(flags[1]) + 1
        slot = version % 2
        leader = group is None or dist.get_rank(group) == 0
        hosts = sorted({p.host for p in gps.places})
        if leader:
            for h in hosts:
                if h == self.info.host:
                    self.buffers[model].begin(slot)
                else:
                    self._set_words(
                        model, h, header_values_after_begin(self._words(model, h), slot)
                    )
        self._barrier(group)
        self._push(model, layout, shards, slot, me)
        self._barrier(group)
        if leader:
            for h in hosts:
                if h == self.info.host:
                    self.buffers[model].publish(slot, version)
                else:
                    self._set_words(
                        model, h, header_values_after_publish(self._words(model, h), slot, version)
                    )
        self._barrier(group)
        return version

    def _check_shards(self, model: str, layout: Layout, shards: Mapping[str, torch.Tensor]) -> str:
        for name, _, p in layout.held_by(self.info.place):
            t = shards.get(name)
            want = layout.spec(name).dtype
            if t is None:
                return f"GPS write of model {model!r}: missing shard for tensor {name!r}"
            if tuple(t.shape) != p.shape or DTYPE_NAMES.get(t.dtype) != want:
                return (
                    f"GPS write of model {model!r}: tensor {name!r} shard is {tuple(t.shape)} "
                    f"{t.dtype}, layout wants {p.shape} {want}"
                )
        return ""

    def _push(
        self, model: str, layout: Layout, shards: Mapping[str, torch.Tensor], slot: int, me: Place
    ) -> None:
        plan = self.plans.get(layout, self.layouts[model])
        pending: dict[int, list[tuple[int, int, int]]] = {}
        staged = {n: t.contiguous() for n, t in shards.items()}
        for t in plan.for_holder(me):
            s = plan.slices[t.slice]
            src_box = layout.pieces[s.tensor][s.src_piece].box
            if t.dst.host == self.info.host:
                dst_box = self.layouts[model].pieces[s.tensor][s.dst_piece].box
                dst = _narrow(
                    self._host_view(model, t.dst.host, slot, s.tensor, s.dst_piece), s.box, dst_box
                )
                dst.copy_(_narrow(staged[s.tensor], s.box, src_box))
            else:
                self.link.register(staged[s.tensor])
                pending.setdefault(t.dst.host, []).extend(
                    self._remote_runs(
                        model,
                        t.dst.host,
                        slot,
                        s.tensor,
                        s.dst_piece,
                        s.box,
                        staged[s.tensor],
                        src_box,
                    )
                )
        for host, pieces in pending.items():
            self.link.transfer("WRITE", next(iter(staged.values())), self._key(model, host), pieces)
        for t in staged.values():
            if pending:
                self.link.unregister(t)
            if t.is_cuda:
                torch.cuda.synchronize(t.device)

    @staticmethod
    def _barrier(group: dist.ProcessGroup | None) -> None:
        if group is not None:
            dist.barrier(group=group)
