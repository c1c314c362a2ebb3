"""Replication-first Reads (the design's rule): a receiver whose host holds the slice reads it
from there, so a host with a full copy reads 0 bytes from another host; only what a host lacks
(grouped GPS) crosses hosts. The old load-spreading plan is kept behind `local_first=False`.
The oracle counts bytes from the layouts themselves: which host holds which rows."""

from __future__ import annotations

from pivot.gps.layout import Layout, grouped_layout, parallel_layout, replicated_layout
from pivot.gps.spec import qwen2_specs
from pivot.gps.transfer_plan import LinkProfile, plan

SPECS = qwen2_specs(2, 16, 32, 2, 2, 8, 64, dtype="float32")
HOST_OF = [r // 2 for r in range(4)]  # two hosts of two ranks, as the two-host test runs


def remote_bytes(src: Layout, dst: Layout, **kw: object) -> tuple[int, int]:
    """(bytes that cross hosts, all bytes) of the plan src -> dst."""
    p = plan(src, dst, LinkProfile(local_bw=50e9, remote_bw=25e9), **kw)  # type: ignore[arg-type]
    far = sum(p.slices[t.slice].nbytes for t in p.transfers() if t.src.host != t.dst.host)
    return far, sum(p.slices[t.slice].nbytes for t in p.transfers())


def test_a_host_with_a_full_copy_reads_nothing_remotely() -> None:
    gps = replicated_layout("m", SPECS, [0, 1])
    for ranks, tp in (([2], 1), ([2, 3], 2), ([0, 2], 2), ([1, 3], 2)):
        replica = parallel_layout("m", SPECS, ranks, HOST_OF, tp=tp)
        far, total = remote_bytes(gps, replica)
        assert far == 0 and total >= sum(s.nbytes for s in SPECS), (ranks, far)


def test_spreading_is_still_there_when_asked_for() -> None:
    gps = replicated_layout("m", SPECS, [0, 1])
    replica = parallel_layout("m", SPECS, [2, 3], HOST_OF, tp=2)
    far, total = remote_bytes(gps, replica, local_first=False)
    assert 0 < far < total  # the planner's load balance sends part of it across (the old 32%)


def test_grouped_gps_crosses_hosts_only_for_what_the_host_lacks() -> None:
    gps = grouped_layout("m", SPECS, [0, 1], 2)  # each host holds half of every tensor's rows
    replica = parallel_layout("m", SPECS, [2], HOST_OF)  # one rank of host 1 reads it whole
    lacking = 0
    for s in SPECS:
        for piece in gps.pieces[s.name]:
            if all(p.host != 1 for p in piece.holders):
                rows = piece.box[0][1] - piece.box[0][0]
                lacking += s.nbytes * rows // s.shape[0]
    far, total = remote_bytes(gps, replica)
    assert 0 < far == lacking < total
