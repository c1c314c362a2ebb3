"""The cost of moving a migrated sequence's KV instead of re-prefilling it (KV-preserving
migration, `planner.kv_migration`; the runtime's side is pivot/engine/kv_export.py): out of the
source replica's devices into host memory, then into the destination's, each device copying
its TP share of the K/V over its own device-host link."""

from __future__ import annotations

from pivot.sim.hardware import ModelSpec

KV_LINK_GB_S = 25.0
"""One device's copy bandwidth to and from pinned host memory, GB/s each way: PCIe Gen5 x16 is
64 GB/s per direction in theory, pinned cudaMemcpy reaches about 25 on Gen4 hosts; an
assumption with a plausible range of 12-50, not a measurement of any cluster."""


def kv_move_s_per_token(spec: ModelSpec, tp: int) -> float:
    """Seconds per token of KV moved from one replica of `tp` devices to another (out and in)."""
    return 2.0 * spec.kv_bytes_per_token / (tp * KV_LINK_GB_S * 1e9)
