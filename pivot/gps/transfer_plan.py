"""Transfer plans: assign every (atomic slice, receiver) demand to one holder.

Pure Python. Replication-first (the default, the design's rule): a demand whose receiver's own
host holds the slice is served by that host, so a host with a full copy reads nothing over the
network (a cross-host read competes with every other host's traffic on the fabric, and a dead
remote host would take the read with it). Only what the host lacks (grouped GPS) crosses hosts,
greedily: each such demand goes to the holder whose accumulated estimated latency after taking
it is smallest (cost = bytes / link bandwidth + per-transfer overhead). `local_first=False`
spreads every demand that way (the load-balanced plan, for fabrics faster than host memory).
Plans are cached by the signatures of both layouts (model, places, parallelism) and the profile.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from typing import NamedTuple

from pivot.gps.layout import Layout, Place
from pivot.gps.refine import AtomicSlice, refine


@dataclass(frozen=True)
class LinkProfile:
    """Profiled link speeds; the host-local path (PCIe or memcpy) is distinct from the fabric."""

    local_bw: float = 50e9  # bytes/s, host memory -> device on the same host
    remote_bw: float = 25e9  # bytes/s, across hosts (RDMA fabric)
    overhead_s: float = 20e-6  # fixed cost per transfer

    def __post_init__(self) -> None:
        if self.local_bw <= 0 or self.remote_bw <= 0 or self.overhead_s < 0:
            raise ValueError(f"LinkProfile: bandwidths must be > 0 and overhead >= 0, got {self}")

    def cost(self, nbytes: int, local: bool) -> float:
        return nbytes / (self.local_bw if local else self.remote_bw) + self.overhead_s


class Transfer(NamedTuple):
    """Move atomic slice `slices[slice]` from holder `src` to receiver `dst`."""

    slice: int
    src: Place
    dst: Place


@dataclass(eq=False)
class TransferPlan:
    """Demands are enumerated slice by slice, receivers in piece order; `sources[d]` serves demand d."""

    src: Layout
    dst: Layout
    slices: list[AtomicSlice]
    sources: list[Place]
    load: dict[Place, float]
    _by: dict[tuple[str, Place], list[Transfer]] = field(default_factory=dict, repr=False)

    @property
    def max_load(self) -> float:
        return max(self.load.values(), default=0.0)

    def transfers(self) -> list[Transfer]:
        out, d = [], 0
        for i, s in enumerate(self.slices):
            for r in s.receivers:
                out.append(Transfer(i, self.sources[d], r))
                d += 1
        return out

    def for_receiver(self, place: Place) -> list[Transfer]:
        key = ("dst", place)
        if key not in self._by:
            self._by[key] = [t for t in self.transfers() if t.dst == place]
        return self._by[key]

    def for_holder(self, place: Place) -> list[Transfer]:
        key = ("src", place)
        if key not in self._by:
            self._by[key] = [t for t in self.transfers() if t.src == place]
        return self._by[key]


def plan(
    src: Layout,
    dst: Layout,
    profile: LinkProfile = LinkProfile(),
    balanced: bool = True,
    local_first: bool = True,
) -> TransferPlan:
    """Plan the re-partitioning src -> dst. `balanced=False` gives the naive first-holder plan;
    `local_first=False` balances every demand across hosts instead of reading host-local first."""
    gc_was_on = gc.isenabled()
    gc.disable()  # planning allocates many small records; cyclic GC passes would dominate
    try:
        return _plan(src, dst, profile, balanced, local_first)
    finally:
        if gc_was_on:
            gc.enable()


def _plan(
    src: Layout, dst: Layout, profile: LinkProfile, balanced: bool, local_first: bool
) -> TransferPlan:
    slices = refine(src, dst)
    if not balanced or local_first:
        sources = (
            _greedy_generic(slices, profile, local_first=True)
            if balanced
            else [s.holders[0] for s in slices for _ in s.receivers]
        )
        return TransferPlan(src, dst, slices, sources, _loads(slices, sources, profile))
    indexed = _holder_classes(slices)
    if indexed is not None and profile.local_bw >= profile.remote_bw:
        classes, by_id = indexed
        sources = _greedy_classes(slices, by_id, profile)
        load = {h: a for members, (acc, _, _) in classes.items() for h, a in zip(members, acc) if a}
        return TransferPlan(src, dst, slices, sources, load)
    sources = _greedy_generic(slices, profile)
    return TransferPlan(src, dst, slices, sources, _loads(slices, sources, profile))


def _loads(
    slices: list[AtomicSlice], sources: list[Place], profile: LinkProfile
) -> dict[Place, float]:
    load: dict[Place, float] = {}
    d = 0
    for s in slices:
        for r in s.receivers:
            h = sources[d]
            load[h] = load.get(h, 0.0) + profile.cost(s.nbytes, h.host == r.host)
            d += 1
    return load


def _holder_classes(slices: list[AtomicSlice]) -> tuple[dict, dict] | None:
    """If distinct holder sets are pairwise disjoint and each has distinct hosts (true for GPS
    layouts and FSDP shards), index them for the fast path; otherwise None."""
    classes: dict[tuple[Place, ...], tuple] = {}
    seen: set[Place] = set()
    by_id: dict[int, tuple] = {}  # equal holder tuples may be distinct objects
    for s in slices:
        h = s.holders
        if id(h) in by_id:
            continue
        if h in classes:
            by_id[id(h)] = classes[h]
            continue
        hosts = {p.host for p in h}
        if len(hosts) != len(h) or seen.intersection(h):
            return None
        seen.update(h)
        classes[h] = by_id[id(h)] = ([0.0] * len(h), {p.host: i for i, p in enumerate(h)}, [0.0])
    return classes, by_id


def _greedy_classes(
    slices: list[AtomicSlice], by_id: dict[int, tuple], profile: LinkProfile
) -> list[Place]:
    """Fast greedy: within one class every remote holder costs the same, so the best choice is
    either the least-loaded holder or the receiver's own host (local is never slower).

    Loads only grow, so a stale minimum `bound` is a lower bound of the true one: a local holder
    that beats it beats the true minimum too, and the O(holders) min() is skipped. When every
    receiver of a slice has a local holder, each holder serving the same number c of them, and
    even the most loaded one passes that test after taking its c, the whole slice is assigned
    at once (the sequential greedy would make exactly these choices)."""
    il, ir, ov = 1.0 / profile.local_bw, 1.0 / profile.remote_bw, profile.overhead_s
    out: list[Place] = []
    append = out.append
    batch: dict[tuple[int, int], tuple | None] = {}
    hosts_of: dict[
        tuple[int, int], tuple[int, ...]
    ] = {}  # receivers -> local holder index, -1 if none
    for s in slices:
        members, receivers = s.holders, s.receivers
        acc, pos, bound = by_id[id(members)]
        key = (id(members), id(receivers))
        info = batch.get(key, False)
        if info is False:
            info = batch[key] = _batch_info(members, receivers, pos)
        cl, cr = s.nbytes * il + ov, s.nbytes * ir + ov
        if info is not None:
            c, local = info  # type: ignore[misc]  # False (not cached yet) was replaced above
            if max(acc) + c * cl <= bound[0] + cr:
                step = c * cl
                acc[:] = [a + step for a in acc]
                out.extend(local)
                continue
        rhosts = hosts_of.get(key)
        if rhosts is None:
            rhosts = hosts_of[key] = tuple(pos.get(r.host, -1) for r in receivers)
        m = bound[0]
        for j in rhosts:
            if j >= 0 and acc[j] + cl <= m + cr:
                acc[j] += cl
                append(members[j])
                continue
            m = min(acc)
            i = acc.index(m)
            if j >= 0 and (j == i or acc[j] + cl <= m + cr):
                acc[j] += cl
                append(members[j])
            else:
                acc[i] = m + cr
                append(members[i])
        bound[0] = m
    return out


def _batch_info(
    members: tuple[Place, ...], receivers: tuple[Place, ...], pos: dict[int, int]
) -> tuple[int, tuple[Place, ...]] | None:
    """(c, local holder per receiver) when every holder is local to exactly c receivers."""
    counts = [0] * len(members)
    local = []
    for r in receivers:
        j = pos.get(r.host)
        if j is None:
            return None
        counts[j] += 1
        local.append(members[j])
    return (counts[0], tuple(local)) if min(counts) == max(counts) else None


def _greedy_generic(
    slices: list[AtomicSlice], profile: LinkProfile, local_first: bool = False
) -> list[Place]:
    """Each demand from the holder with the smallest accumulated latency after taking it; with
    `local_first`, only among the holders on its receiver's host when there are any."""
    acc: dict[Place, float] = {}
    local_of: dict[tuple[int, int], tuple[Place, ...]] = {}  # (id(holders), host) -> local ones
    out: list[Place] = []
    for s in slices:
        for r in s.receivers:
            candidates = s.holders
            if local_first:
                key = (id(s.holders), r.host)
                local = local_of.get(key)
                if local is None:
                    local = local_of[key] = tuple(h for h in s.holders if h.host == r.host)
                candidates = local or s.holders
            best, best_t = s.holders[0], float("inf")
            for h in candidates:
                t = acc.get(h, 0.0) + profile.cost(s.nbytes, h.host == r.host)
                if t < best_t:
                    best, best_t = h, t
            acc[best] = best_t
            out.append(best)
    return out


class PlanCache:
    """Plans memoised by <model, devices, parallelism> of both layouts and the link profile."""

    def __init__(self, profile: LinkProfile = LinkProfile(), local_first: bool = True) -> None:
        self.profile, self.local_first = profile, local_first
        self._plans: dict[tuple, TransferPlan] = {}
        self.hits = 0
        self.misses = 0

    def get(self, src: Layout, dst: Layout) -> TransferPlan:
        key = (src.signature, dst.signature)
        found = self._plans.get(key)
        if found is not None:
            self.hits += 1
            return found
        self.misses += 1
        made = self._plans[key] = plan(src, dst, self.profile, local_first=self.local_first)
        return made
