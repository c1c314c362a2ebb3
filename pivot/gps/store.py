"""GPS store: host-memory copies of every model, Read / Write by re-partitioning, never torn.

Each host keeps one double-buffered shm file per model (created by its local rank 0). A Read
pulls this rank's atomic slices: a copy out of the shared buffer when the holder is this host,
a NIXL READ when it is another host. A Write pushes the writer's slices the same way into the
unpublished slot of every host; the version is published only after every host's copy is done.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from pivot.gps.host_buffers import HostBuffers, narrow
from pivot.gps.host_buffers import HostInfo as HostInfo  # re-exported: GPSStore users build one
from pivot.gps.layout import Layout, Place
from pivot.gps.shm import (
    W_PUB_SLOT,
    W_PUB_VERSION,
    W_SEQ,
    SharedBuffer,
    header_values_after_begin,
    header_values_after_publish,
    readable,
)
from pivot.gps.torch_specs import DTYPE_NAMES, TORCH_DTYPES
from pivot.gps.transfer_plan import LinkProfile, PlanCache

if TYPE_CHECKING:
    from pivot.gps.nixl_link import NixlLink


class GPSStore:
    """This process's handle on GPS. All ranks of a job construct one (same kv store, same
    namespace) and `register` every model; Reads are per rank, Writes collective over the
    writers' process group. The buffers, headers and slice addresses are its `host_buffers`;
    it adds the transfer plans and the Read and Write protocols over them."""

    def __init__(
        self,
        kv: dist.Store,
        info: HostInfo,
        namespace: str = "pivot_gps",
        profile: LinkProfile = LinkProfile(),
        retry_timeout_s: float = 30.0,
        local_first: bool = True,
    ) -> None:
        self.host_buffers = HostBuffers(kv, info, namespace)
        self.plans = PlanCache(profile, local_first)
        self.last_remote_bytes = 0  # of the latest `read`: what crossed hosts (the shift-up record)
        self.retry_timeout_s = retry_timeout_s

    # the host buffers' parts every GPS user reaches: forwarded, so callers hold the store alone
    @property
    def kv(self) -> dist.Store:
        return self.host_buffers.kv

    @property
    def info(self) -> HostInfo:
        return self.host_buffers.info

    @property
    def namespace(self) -> str:
        return self.host_buffers.namespace

    @property
    def layouts(self) -> dict[str, Layout]:
        return self.host_buffers.layouts

    @property
    def buffers(self) -> dict[str, SharedBuffer]:
        return self.host_buffers.buffers

    @property
    def link(self) -> NixlLink:
        return self.host_buffers.link

    def register(self, layout: Layout) -> None:
        """`HostBuffers.register`: adopt `layout` for its model, once per model."""
        self.host_buffers.register(layout)

    def remove_files(self) -> None:
        """`HostBuffers.remove_files`: local rank 0 unlinks this attempt's files on its host."""
        self.host_buffers.remove_files()

    def close(self) -> None:
        """`HostBuffers.close`: release memory registrations and this host's shm files."""
        self.host_buffers.close()

    def latest(self, model: str) -> int | None:
        """The newest version published on this host, or None before the first Write."""
        return self.host_buffers.latest(model)

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
            before = {h: self.host_buffers.words(model, h) for h in hosts}
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
                after = {h: self.host_buffers.words(model, h) for h in hosts}
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
                src = narrow(
                    self.host_buffers.host_view(model, t.src.host, slot, s.tensor, s.src_piece),
                    s.box,
                    src_piece.box,
                )
                narrow(out, s.box, dst_piece.box).copy_(src, non_blocking=out.is_cuda)
            else:
                pending.setdefault(t.src.host, []).extend(
                    self.host_buffers.remote_runs(
                        model, t.src.host, slot, s.tensor, s.src_piece, s.box, out, dst_piece.box
                    )
                )
        for host, pieces in pending.items():
            self.link.transfer("READ", any_out, self.host_buffers.key(model, host), pieces)
        if any_out.is_cuda:
            torch.cuda.synchronize(any_out.device)

    # Write ------------------------------------------------------------------------------------
    def write(
        self,
        model: str,
        layout: Layout,
        shards: Mapping[str, torch.Tensor],
        group: dist.ProcessGroup | None = None,
        version: int | None = None,
    ) -> int:
        """Commit this writer's `shards` (its pieces under `layout`); collective over `group`
        (None: this rank is the only writer). Returns the published version: `version` for the
        model's first Write (the caller's own numbering starts there: the policy's version of a
        resumed job), else the one after the published one; a Write always fills the slot
        readers are not on, so a `version` given later must be that next one."""
        me = self.info.place
        gps = self.layouts[model]
        problem = self._check_shards(model, layout, shards)
        words = self.host_buffers.words(model, min(p.host for p in gps.places))
        flags = torch.tensor(
            [1 if problem else 0, words[W_PUB_VERSION], words[W_PUB_SLOT]], dtype=torch.int64
        )
        if group is not None:
            dist.all_reduce(flags, op=dist.ReduceOp.MAX, group=group)
        if flags[0]:
            raise ValueError(
                problem or f"GPS write of model {model!r}: another writer rejected its shards"
            )
        pub, published = int(flags[1]), int(flags[2]) >= 0
        if version is None or published:
            if version not in (None, pub + 1):
                raise ValueError(
                    f"GPS write of model {model!r}: version {version} is not the one after "
                    f"the published {pub}"
                )
            version = pub + 1
        slot = version % 2
        leader = group is None or dist.get_rank(group) == 0
        hosts = sorted({p.host for p in gps.places})
        if leader:
            for h in hosts:
                if h == self.info.host:
                    self.buffers[model].begin(slot)
                else:
                    self.host_buffers.set_words(
                        model, h, header_values_after_begin(self.host_buffers.words(model, h), slot)
                    )
        self._barrier(group)
        self._push(model, layout, shards, slot, me)
        self._barrier(group)
        if leader:
            for h in hosts:
                if h == self.info.host:
                    self.buffers[model].publish(slot, version)
                else:
                    self.host_buffers.set_words(
                        model,
                        h,
                        header_values_after_publish(
                            self.host_buffers.words(model, h), slot, version
                        ),
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
                dst = narrow(
                    self.host_buffers.host_view(model, t.dst.host, slot, s.tensor, s.dst_piece),
                    s.box,
                    dst_box,
                )
                dst.copy_(narrow(staged[s.tensor], s.box, src_box))
            else:
                self.link.register(staged[s.tensor])
                pending.setdefault(t.dst.host, []).extend(
                    self.host_buffers.remote_runs(
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
            self.link.transfer(
                "WRITE", next(iter(staged.values())), self.host_buffers.key(model, host), pieces
            )
        for buf in staged.values():
            if pending:
                self.link.unregister(buf)
            if buf.is_cuda:
                torch.cuda.synchronize(buf.device)

    @staticmethod
    def _barrier(group: dist.ProcessGroup | None) -> None:
        if group is not None:
            dist.barrier(group=group)
