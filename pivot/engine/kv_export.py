"""KV-preserving migration: a sequence's cached K/V (and linear-attention state) leave one
engine as files in host shared memory and enter another by handle, instead of being recomputed.

`KVHandle` travels with the aborted sequence's partial `Request` (a typed record, so it crosses
the control plane as MessagePack like the rest of the request). It names a base path; TP rank r
of the source wrote its head slice to `{path}_r{r}` (safetensors: typed, never a pickle), so a
destination of the same TP size reads rank r's file on its rank r. The handle also carries
what the K/V depend on (the layout and the weights version): a destination that differs, that
cannot reach the files, or has no room, re-prefills instead and counts it (`KVCounters`).

Every rank of a replica exports and imports its own slice in lockstep: the leader decides (which
sequences, which cache slots) and broadcasts a `KVPlan` (MessagePack bytes, two tensor
broadcasts) over the replica's TP group; all ranks then run the same copies.

Transport (pivot/engine/kv_transport.py): the files live in /dev/shm of the host that wrote
them; a destination on that host reads them directly (host shared memory, as GPS's buffers
are), one on another host READs them over GPS's NIXL agent when the source served them, one on
the same host and on CUDA may open the source's device copy by CUDA IPC. The handle says where
the KV lives; the destination picks.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from safetensors.torch import save_file

from pivot.engine.attention import KVCache
from pivot.engine.block_manager import BlockManager
from pivot.engine.kv_transport import KVPlace, Offers, fetch, rank_path, release
from pivot.engine.kv_transport import reachable as reachable_from
from pivot.engine.linear_state import LinearStates
from pivot.engine.scheduler import Scheduler
from pivot.engine.sequence import REFUSALS, KVHandle, Sequence

if TYPE_CHECKING:
    from pivot.engine.model_runner import ModelRunner

log = logging.getLogger(__name__)


@dataclass
class SliceOp:
    seq_id: int
    path: str
    slots: list[int]
    """Cache slots of the sequence's first len(slots) tokens, in token order (the same on every
    rank: followers mirror the leader's block tables)."""
    source: KVHandle | None = None
    """On import: the handle to read from (each rank fetches its slice by its transport)."""


@dataclass
class KVPlan:
    ops: list[SliceOp] = field(default_factory=list)


@cache
def _plan_codec() -> tuple[Any, Any]:
    """(encoder, KVPlan decoder). msgspec is imported on first use, not with the engine: an
    engine without KV migration runs where msgspec is not installed (the GPU test image)."""
    import msgspec

    return msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder(KVPlan)


@dataclass
class KVCounters:
    exported: int = 0
    """Sequences whose KV left this engine with their partial."""
    imported: int = 0
    """Sequences that arrived with their KV and computed none of it again."""
    imported_tokens: int = 0
    fallbacks: int = 0
    """Sequences that arrived with a handle this engine could not use: re-prefilled."""
    fallback_tokens: int = 0
    refused: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REFUSALS, 0))
    """Fallbacks by reason (`REFUSALS`); they sum to `fallbacks`."""

    def stats(self) -> dict[str, int]:
        """As `EngineStats` fields."""
        return dict(
            kv_imported=self.imported,
            kv_imported_tokens=self.imported_tokens,
            kv_fallbacks=self.fallbacks,
            kv_fallback_tokens=self.fallback_tokens,
            **{f"kv_refused_{r}": n for r, n in self.refused.items()},
        )


def kv_layout(cache: KVCache, linear: bool) -> str:
    layers, _, heads, dim = cache.k.shape
    return f"L{layers}xH{heads}xD{dim}:{str(cache.k.dtype).removeprefix('torch.')}:lin{int(linear)}"


def token_slots(table: list[int], block_size: int, num_tokens: int) -> list[int]:
    return [table[t // block_size] * block_size + t % block_size for t in range(num_tokens)]


def share_plan(plan: KVPlan | None, group: dist.ProcessGroup | None) -> KVPlan:
    """The leader's plan on every rank of `group` (typed bytes, nothing unpickled)."""
    if group is None:
        assert plan is not None
        return plan
    leader = dist.get_rank(group) == 0
    data = _plan_codec()[0].encode(plan) if leader else b""
    size = torch.tensor([len(data)], dtype=torch.int64)
    dist.broadcast(size, group_src=0, group=group)
    buf = (
        torch.frombuffer(bytearray(data), dtype=torch.uint8)
        if leader
        else torch.empty(int(size), dtype=torch.uint8)
    )
    dist.broadcast(buf, group_src=0, group=group)
    if not leader:
        return _plan_codec()[1].decode(buf.numpy().tobytes())
    if plan is None:
        raise ValueError("KV plan: the group's leader has none to share")
    return plan


def write_slices(
    plan: KVPlan,
    rank: int,
    cache: KVCache,
    linear: LinearStates | None,
    offers: Offers | None = None,
) -> None:
    """This rank's slice of each planned sequence to `{op.path}_r{rank}` in host memory, offered
    beyond this host as `offers` can (NIXL, CUDA IPC)."""
    for op in plan.ops:
        idx = torch.tensor(op.slots, dtype=torch.long, device=cache.k.device)
        tensors = {"k": cache.k.index_select(1, idx), "v": cache.v.index_select(1, idx)}
        if linear is not None:
            for layer, (conv, state) in linear.get(op.seq_id).items():
                tensors[f"conv.{layer}"], tensors[f"state.{layer}"] = conv, state
        tmp = rank_path(op.path, rank) + ".tmp"
        save_file({k: t.cpu().contiguous() for k, t in tensors.items()}, tmp)
        os.replace(tmp, rank_path(op.path, rank))  # a reader never sees a half-written file
        if offers is not None:
            offers.offer(op.path, rank, tensors)


def read_slices(
    plan: KVPlan, rank: int, cache: KVCache, linear: LinearStates | None, here: KVPlace
) -> None:
    """Each planned sequence's slice into its slots, fetched by the transport `here` picks for
    its handle (the source's file or served copy is consumed)."""
    for op in plan.ops:
        assert op.source is not None, f"KV import of sequence {op.seq_id} without its handle"
        tensors = fetch(op.source, rank, here, cache.k.device)
        n = len(op.slots)
        if tensors["k"].shape[1] != n:
            raise RuntimeError(
                f"KV import of sequence {op.seq_id}: {op.path} rank {rank} holds "
                f"{tensors['k'].shape[1]} tokens, want {n}"
            )
        idx = torch.tensor(op.slots, dtype=torch.long, device=cache.k.device)
        cache.k.index_copy_(1, idx, tensors["k"].to(cache.k.device))
        cache.v.index_copy_(1, idx, tensors["v"].to(cache.v.device))
        if linear is not None:
            dev = cache.k.device
            layers = sorted(int(k.split(".")[1]) for k in tensors if k.startswith("conv."))
            linear.put(
                op.seq_id,
                {i: (tensors[f"conv.{i}"].to(dev), tensors[f"state.{i}"].to(dev)) for i in layers},
            )


def reachable(handle: KVHandle, here: KVPlace | None = None) -> bool:
    """Every rank's slice of `handle` can be read from `here` (default: host 0, no NIXL)."""
    return reachable_from(handle, here or KVPlace())


def discard(handle: KVHandle, here: KVPlace | None = None) -> None:
    """Give up a handle nobody will import (files this host can see go; a remote source is told)."""
    release(handle, here or KVPlace())


def sweep(prefix: str) -> list[str]:
    """Remove every file an engine exported under `prefix` that was never imported."""
    folder, stem = os.path.split(prefix)
    removed = []
    for name in os.listdir(folder) if os.path.isdir(folder) else []:
        if name.startswith(stem):
            os.unlink(os.path.join(folder, name))
            removed.append(name)
    return removed


class KVPorter:
    """One engine's exports and imports (`Engine.enable_kv_migration`). The leader calls `export`
    and `accept` with real sequences and every rank then calls the collective part with it
    (followers with nothing): `export` / `load` share the leader's plan and copy this rank's
    slice."""

    def __init__(
        self,
        prefix: str,
        runner: ModelRunner,
        blocks: BlockManager,
        scheduler: Scheduler,
        place: KVPlace | None = None,
        nixl_prefix: str = "",
    ) -> None:
        """`place`: this rank's host, device kind and NIXL link (pivot/engine/kv_transport.py);
        `nixl_prefix`: store key prefix to serve exports under when `place` has a link."""
        self.prefix, self.runner, self.blocks, self.scheduler = prefix, runner, blocks, scheduler
        self.place = place or KVPlace()
        self.offers = Offers(self.place, nixl_prefix)
        self.counters = KVCounters()
        self._nonce = 0

    @property
    def layout(self) -> str:
        assert self.runner.cache is not None
        return kv_layout(self.runner.cache, self.runner.linear_states is not None)

    def export(self, seqs: list[Sequence], version: int) -> dict[int, KVHandle]:
        """Write the computed K/V of `seqs` (the leader's; followers pass []) to host memory;
        returns each exported sequence's handle (on the leader). Sequences with nothing
        computed (waiting, preempted) export nothing: they re-prefill anyway."""
        runner = self.runner
        plan = None
        if runner.is_leader:
            plan = KVPlan()
            for s in seqs:
                table = self.blocks.tables.get(s.id)
                if runner.cache is None or table is None or s.num_computed == 0:
                    continue
                path = f"{self.prefix}_s{s.id}_n{self._nonce}"
                self._nonce += 1
                plan.ops.append(
                    SliceOp(s.id, path, token_slots(table, self.blocks.block_size, s.num_computed))
                )
        plan = share_plan(plan, runner.group)
        self.offers.collect()
        if runner.cache is not None:
            write_slices(plan, runner.rank, runner.cache, runner.linear_states, self.offers)
        if plan.ops and runner.group is not None:
            # the leader hands out the handle only once every rank's slice is written: without
            # this a destination could look for a follower's file before it exists (a refusal
            # as "unreachable", seen at TP=2 under load)
            dist.barrier(group=runner.group)
        self.counters.exported += len(plan.ops)
        layout = self.layout if plan.ops else ""
        here = self.place
        return {
            op.seq_id: KVHandle(
                op.path,
                len(op.slots),
                runner.world,
                layout,
                version,
                host=here.host,
                nixl_key=self.offers.nixl_key(op.path),
                cuda_ipc=here.cuda,
            )
            for op in plan.ops
        }

    def refusal(self, seq: Sequence, handle: KVHandle, version: int) -> str | None:
        """Why this engine cannot take `handle` for `seq` now (one of `REFUSALS`), or None."""
        cache, n = self.runner.cache, handle.num_tokens
        if cache is None:
            return "released"
        if handle.tp_size != self.runner.world:
            return "other_tp"
        if handle.layout != self.layout:
            return "other_layout"
        if handle.weights_version != version:
            return "stale"
        if not 0 < n < len(seq.token_ids):
            return "bad_length"
        if not reachable(handle, self.place):
            return "unreachable"
        if (
            self.blocks.blocks_for(n) * self.blocks.block_size
            > self.scheduler.free_tokens_for_admission()
        ):
            return "no_room"
        return None

    def accept(self, seq: Sequence, handle: KVHandle, version: int) -> SliceOp | None:
        """Leader: place `seq` (not yet scheduled) over fresh blocks holding `handle`'s tokens as
        computed, or None (the handle is discarded, the sequence re-prefills, counted by reason)."""
        n, c = handle.num_tokens, self.counters
        reason = self.refusal(seq, handle, version)
        if reason is None and not self.blocks.allocate(seq, n):
            reason = "no_room"
        if reason is not None:
            discard(handle, self.place)
            c.fallbacks, c.fallback_tokens = c.fallbacks + 1, c.fallback_tokens + n
            c.refused[reason] += 1
            log.debug(
                "sequence %d: KV handle not taken (%s): %s, re-prefilled", seq.id, reason, handle
            )
            return None
        self.blocks.commit(seq, 0, n)
        seq.num_computed = n
        c.imported, c.imported_tokens = c.imported + 1, c.imported_tokens + n
        table = self.blocks.tables[seq.id]
        return SliceOp(seq.id, handle.path, token_slots(table, self.blocks.block_size, n), handle)

    def arrive(self, seq: Sequence, handle: KVHandle, version: int, ops: list[SliceOp]) -> bool:
        """`accept`, queuing the slice copy in `ops` (for `load`); whether the KV was taken."""
        op = self.accept(seq, handle, version)
        if op is not None:
            ops.append(op)
        return op is not None

    def load(self, ops: list[SliceOp]) -> None:
        """Every rank: copy the accepted slices (the leader's `ops`; followers pass []) into the cache."""
        plan = share_plan(KVPlan(ops) if self.runner.is_leader else None, self.runner.group)
        if plan.ops:
            assert self.runner.cache is not None, "KV import into a released engine"
            read_slices(
                plan, self.runner.rank, self.runner.cache, self.runner.linear_states, self.place
            )
