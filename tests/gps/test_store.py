"""Store tests: single-process versions and failures; two processes playing two hosts."""

from __future__ import annotations

import os
import socket
import uuid
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from pivot.gps.layout import fsdp_layout, grouped_layout, parallel_layout, replicated_layout
from pivot.gps.spec import qwen2_specs
from pivot.gps.store import GPSStore, HostInfo
from tests import forked_ranks

SPECS = qwen2_specs(2, 16, 32, 4, 2, 4, 64, dtype="float32")


def model_state(seed: int) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {s.name: torch.randn(s.shape, generator=g) for s in SPECS}


def leftovers(ns: str) -> list[str]:
    return [f for f in os.listdir("/dev/shm") if f.startswith(ns)]


@pytest.fixture
def solo():
    ns = "gpst" + uuid.uuid4().hex[:8]
    store = GPSStore(dist.HashStore(), HostInfo(0, 0, 0, (0,)), namespace=ns)
    store.register(replicated_layout("m", SPECS, [0]))
    yield store
    store.close()
    assert leftovers(ns) == []


def test_versions_double_buffered(solo):
    full = parallel_layout("m", SPECS, [0], [0])
    with pytest.raises(LookupError, match="nothing published"):
        solo.read("m", full)
    a, b, c = model_state(1), model_state(2), model_state(3)
    assert solo.write("m", full, a) == 1 and solo.write("m", full, b) == 2
    got, v = solo.read("m", full)
    assert v == 2 and all(torch.equal(got[k], b[k]) for k in b)
    got, v = solo.read("m", full, version=1)  # the previous version stays in the other slot
    assert v == 1 and all(torch.equal(got[k], a[k]) for k in a)
    solo.write("m", full, c)
    with pytest.raises(LookupError, match="overwritten"):
        solo.read("m", full, version=1)


def test_the_first_write_carries_the_callers_version_and_each_next_one_counts_on(solo) -> None:
    """A resumed job's policy starts at its checkpoint's version: GPS stores that number itself
    (no offset to add and remove), and a Write after it can only be the next one, so it never
    fills the slot readers are on."""
    full = parallel_layout("m", SPECS, [0], [0])
    a, b = model_state(1), model_state(2)
    assert solo.write("m", full, a, version=7) == 7 and solo.write("m", full, b) == 8
    got, v = solo.read("m", full, version=7)
    assert v == 7 and all(torch.equal(got[k], a[k]) for k in a)
    with pytest.raises(ValueError, match="not the one after the published 8"):
        solo.write("m", full, a, version=8)
    assert solo.write("m", full, a, version=9) == 9


def test_a_failure_removes_this_attempts_files_on_this_host_and_nothing_else() -> None:
    ns = f"pivot-gpst{uuid.uuid4().hex[:8]}-0"
    store = GPSStore(dist.HashStore(), HostInfo(0, 0, 0, (0,)), namespace=ns)
    store.register(replicated_layout("m", SPECS, [0]))
    kv = f"/dev/shm/{ns}_h0_kv_rollout0_s3_n1_r0"  # a migrating sequence's export
    other = f"/dev/shm/{ns}x_h0_m"  # another job whose name extends this one's
    for path in (kv, other):
        open(path, "wb").close()
    try:
        store.remove_files()  # what a failed job's teardown calls (pivot/runtime/job/launch.py)
        assert leftovers(ns) == [f"{ns}x_h0_m"]
        store.close()  # the files are gone already: closing is still clean
    finally:
        for path in (kv, other):
            if os.path.exists(path):
                os.unlink(path)


def test_bad_shard_and_failed_write_keep_previous_version(solo, monkeypatch):
    full = parallel_layout("m", SPECS, [0], [0])
    a = model_state(1)
    solo.write("m", full, a)
    bad = dict(a, **{"model.norm.weight": torch.zeros(3)})
    with pytest.raises(ValueError, match=r"model 'm'.*'model.norm.weight'"):
        solo.write("m", full, bad)
    wrong_dtype = dict(a, **{"lm_head.weight": a["lm_head.weight"].half()})
    with pytest.raises(ValueError, match="lm_head.weight"):
        solo.write("m", full, wrong_dtype)

    def boom(*args, **kwargs):
        raise RuntimeError("writer died mid-copy")

    monkeypatch.setattr(solo, "_push", boom)
    with pytest.raises(RuntimeError, match="mid-copy"):
        solo.write("m", full, model_state(2))
    monkeypatch.undo()
    got, v = solo.read("m", full)
    assert v == 1 and all(torch.equal(got[k], a[k]) for k in a)
    assert solo.write("m", full, model_state(3)) == 2  # the slot left mid-write is reusable


# --- two processes, each a separate "host" -------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def two_hosts(rank: int, port: int, ns: str, scenario: str, grouped: bool) -> None:
    kv = dist.TCPStore("127.0.0.1", port, 2, rank == 0, timeout=timedelta(seconds=60))
    dist.init_process_group("gloo", store=kv, rank=rank, world_size=2)
    store = GPSStore(kv, HostInfo(rank, rank, 0, (0, 1)), namespace=ns)
    try:
        gps = (
            grouped_layout("m", SPECS, [0, 1], 2)
            if grouped
            else replicated_layout("m", SPECS, [0, 1])
        )
        store.register(gps)
        dist.barrier()
        world = dist.new_group([0, 1])
        state = model_state(7)
        fsdp = fsdp_layout("m", SPECS, [0, 1], [0, 1])
        shards = {
            n: state[n][p.box[0][0] : p.box[0][1]] for n, _, p in fsdp.held_by(store.info.place)
        }
        v = store.write("m", fsdp, shards, group=world)
        tp2 = parallel_layout("m", SPECS, [0, 1], [0, 1], tp=2)
        dp2 = parallel_layout("m", SPECS, [0, 1], [0, 1], dp=2)
        if scenario == "roundtrip":
            for layout in (tp2, dp2):
                got, got_v = store.read("m", layout)
                assert got_v == v
                for name, _, piece in layout.held_by(store.info.place):
                    want = state[name][tuple(slice(a, b) for a, b in piece.box)]
                    assert torch.equal(got[name], want), name
            if grouped:  # half of every tensor lives on the other host: NIXL did real reads
                assert store.host_buffers._link is not None
        elif scenario == "torn":
            # rank 0 keeps writing constant-valued models; rank 1 reads in a loop
            dist.barrier()
            if rank == 0:
                for i in range(1, 16):
                    const = {n: torch.full(s.shape, float(i)) for n, s in zip(state, SPECS)}
                    full = parallel_layout("m", SPECS, [0], [0, 1])
                    store.write("m", full, const)
                kv.set("done", b"1")
            else:
                seen = set()
                while not kv.check(["done"]) or len(seen) < 1:
                    got, ver = store.read("m", dp2)
                    if ver == v:  # the random-valued first version
                        assert all(torch.equal(got[n], state[n]) for n in got)
                        continue
                    values = {float(t.min()) for t in got.values()} | {
                        float(t.max()) for t in got.values()
                    }
                    assert len(values) == 1, f"torn read at version {ver}: {values}"
                    seen.add(ver)
        dist.barrier()
    finally:
        store.close()
        dist.destroy_process_group()


@pytest.mark.slow
@pytest.mark.parametrize("grouped", [False, True])
def test_fsdp_write_then_tp_and_dp_reads_across_two_hosts(grouped):
    ns = "gpst" + uuid.uuid4().hex[:8]
    forked_ranks.spawn(two_hosts, args=(free_port(), ns, "roundtrip", grouped), nprocs=2)
    assert leftovers(ns) == []


@pytest.mark.slow
def test_reader_never_sees_a_torn_version_across_hosts():
    ns = "gpst" + uuid.uuid4().hex[:8]
    forked_ranks.spawn(two_hosts, args=(free_port(), ns, "torn", True), nprocs=2)
    assert leftovers(ns) == []
