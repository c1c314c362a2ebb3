"""GPS Reads in the destination's layout: each rank of a TP=2 replica receives exactly its slice.

One process plays both ranks of one host (two GPS handles on the same shared memory). The oracle
is a hand-written table of which dimension each Qwen2 tensor splits on under TP, and torch.chunk.
"""

from __future__ import annotations

import uuid

import pytest
import torch
import torch.distributed as dist

from pivot.dist import Slot
from pivot.gps.spec import qwen2_specs
from pivot.gps.store import GPSStore, HostInfo
from pivot.runtime.weights.service import WeightService

SPECS = qwen2_specs(
    layers=2, hidden=16, intermediate=32, heads=4, kv_heads=2, head_dim=4, vocab=64, dtype="float32"
)
# Megatron-style TP: column-parallel q/k/v (and biases), gate, up; row-parallel o, down;
# vocabulary-parallel embedding and head; norms whole
SPLIT_DIM = {
    "q_proj.weight": 0,
    "q_proj.bias": 0,
    "k_proj.weight": 0,
    "k_proj.bias": 0,
    "v_proj.weight": 0,
    "v_proj.bias": 0,
    "gate_proj.weight": 0,
    "up_proj.weight": 0,
    "o_proj.weight": 1,
    "down_proj.weight": 1,
    "embed_tokens.weight": 0,
    "lm_head.weight": 0,
}


def _split_dim(name: str) -> int | None:
    return next((d for suffix, d in SPLIT_DIM.items() if name.endswith(suffix)), None)


@pytest.mark.parametrize("dtype", ["", "bfloat16"])
def test_tp2_replica_reads_exactly_its_slice(dtype: str) -> None:
    """With `dtype` GPS holds (and a replica reads) the model dtype whatever the checkpoint's."""
    kv, ns, host_of = dist.HashStore(), "gpsw" + uuid.uuid4().hex[:8], (0, 0)
    g = torch.Generator().manual_seed(0)
    full = {s.name: torch.randn(s.shape, generator=g) for s in SPECS}
    no_train = Slot("train", 0, ())
    stores = [GPSStore(kv, HostInfo(r, 0, r, host_of), namespace=ns) for r in (0, 1)]
    try:
        services = [
            WeightService(
                st, {"policy": SPECS, "genrm": SPECS}, host_of, no_train, 0, "cpu", dtype=dtype
            )
            for st in stores
        ]
        services[0].publish("policy", full)
        replica = Slot("rollout", 0, (0, 1))
        if dtype:
            full = {name: t.to(torch.bfloat16) for name, t in full.items()}
        total = sum(t.numel() * t.element_size() for t in full.values())
        whole = sum(t.numel() * t.element_size() for n, t in full.items() if _split_dim(n) is None)
        for rank, service in enumerate(services):
            got, version = service.read("policy", replica, None)
            assert version == 0 and set(got) == set(full)  # the initial policy
            for name, t in got.items():
                dim = _split_dim(name)
                expect = full[name] if dim is None else full[name].chunk(2, dim)[rank]
                assert torch.equal(t, expect), name
            read = sum(t.numel() * t.element_size() for t in got.values())
            assert read == (total - whole) // 2 + whole  # half of every split tensor, norms whole
    finally:
        for st in reversed(stores):
            st.close()


def test_read_into_buffers_returns_whole_tensors_the_buffer_only_slices() -> None:
    """Reading into an engine's parameters: slices land in place (and come back as the buffers);
    a tensor GPS keeps whole whose buffer is a slice (a fused tensor the engine cuts per section)
    comes back full and leaves the buffer alone."""
    kv, ns, host_of = dist.HashStore(), "gpsw" + uuid.uuid4().hex[:8], (0,)
    full = {s.name: torch.randn(s.shape, generator=torch.Generator().manual_seed(1)) for s in SPECS}
    store = GPSStore(kv, HostInfo(0, 0, 0, host_of), namespace=ns)
    try:
        service = WeightService(
            store, {"policy": SPECS, "genrm": SPECS}, host_of, Slot("train", 0, ()), 0, "cpu"
        )
        service.publish("policy", full)
        fused = "model.norm.weight"  # kept whole by GPS; pretend the reader holds half of it
        buffers = {name: torch.zeros(t.shape) for name, t in full.items()}
        buffers[fused] = torch.zeros(full[fused].shape[0] // 2)
        got, _ = service.read("policy", Slot("rollout", 0, (0,)), None, out=buffers)
        assert torch.equal(got[fused], full[fused]) and not buffers[fused].any()
        for name, t in full.items():
            if name != fused:
                assert got[name] is buffers[name] and torch.equal(buffers[name], t), name
    finally:
        store.close()


def test_sglang_replica_reads_whole_on_its_leader_and_nothing_elsewhere() -> None:
    """A TP=2 replica served by sglang: sglang shards the model under its own TP, so the leader
    Reads every tensor whole (into host memory) and the parked rank reads nothing, same version."""
    kv, ns, host_of = dist.HashStore(), "gpsw" + uuid.uuid4().hex[:8], (0, 0)
    full = {s.name: torch.randn(s.shape, generator=torch.Generator().manual_seed(2)) for s in SPECS}
    stores = [GPSStore(kv, HostInfo(r, 0, r, host_of), namespace=ns) for r in (0, 1)]
    try:
        services = [
            WeightService(
                st,
                {"policy": SPECS, "genrm": SPECS},
                host_of,
                Slot("train", 0, ()),
                0,
                "cpu",
                whole=frozenset({"reward"}),
            )
            for st in stores
        ]
        services[0].publish("genrm", full)
        replica = Slot("reward", 0, (0, 1))
        got, version = services[0].read("genrm", replica, None)
        assert (
            version == 0
            and got.keys() == full.keys()
            and all(torch.equal(got[k], full[k]) for k in full)
        )
        assert services[0].last_read_bytes == sum(
            t.numel() * t.element_size() for t in full.values()
        )
        got, version = services[1].read("genrm", replica, None)
        assert got == {} and version == 0 and services[1].last_read_bytes == 0
    finally:
        for st in reversed(stores):
            st.close()
