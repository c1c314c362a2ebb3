"""GPS benchmark: host-local Read (TP=1, TP=2) and NIXL cross-"host" Read vs raw torch copies of
the same bytes, and planning latency for 128 devices x Qwen2.5-72B (cold and cached).

    python tools/bench_gps.py [--gb 1.0] [--reps 5]

Every figure is printed next to its reference measured in this run. Destinations are warmed
first (a fresh buffer pays page faults on first touch, which would dominate).
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pivot.gps.layout import parallel_layout, replicated_layout  # noqa: E402
from pivot.gps.spec import model_bytes, qwen2_specs, qwen25_72b_specs  # noqa: E402
from pivot.gps.store import GPSStore, HostInfo  # noqa: E402
from pivot.gps.torch_specs import TORCH_DTYPES  # noqa: E402
from pivot.gps.transfer_plan import PlanCache  # noqa: E402


def bench_specs(gb: float):
    layers = max(1, round(gb * 1e9 / (2 * (4 * 2048 * 2048 // 2 + 3 * 2048 * 5632))))
    return qwen2_specs(layers, 2048, 5632, 16, 4, 128, 32000, dtype="bfloat16")


def best(fn, reps: int) -> float:
    fn()  # warm
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def paired(read, nbytes: int, reps: int) -> tuple[float, float]:
    """Best-of times of `read` and of a raw copy of nbytes, interleaved so load noise hits both."""
    src = torch.ones(nbytes, dtype=torch.uint8)
    dst = torch.ones(nbytes, dtype=torch.uint8)
    t_read, t_raw = [], []
    for _ in range(reps):
        t_read.append(best(read, 1))
        t_raw.append(best(lambda: dst.copy_(src), 1))
    return min(t_read), min(t_raw)


def fill(specs):
    return {s.name: torch.ones(s.shape, dtype=TORCH_DTYPES[s.dtype]) for s in specs}


def local_reads(gb: float, reps: int) -> None:
    specs = bench_specs(gb)
    nbytes = model_bytes(specs)
    store = GPSStore(
        dist.HashStore(), HostInfo(0, 0, 0, (0, 0)), namespace="gpsbench" + uuid.uuid4().hex[:6]
    )
    try:
        store.register(replicated_layout("m", specs, [0]))
        store.write("m", parallel_layout("m", specs, [0], [0, 0]), fill(specs))
        for tp in (1, 2):
            layout = parallel_layout("m", specs, [0, 1][:tp], [0, 0], tp=tp)
            out, _ = store.read("m", layout)
            got = sum(t.numel() * t.element_size() for t in out.values())
            t_read, t_raw = paired(lambda lay=layout, o=out: store.read("m", lay, out=o), got, reps)
            print(
                f"host-local Read TP={tp} ({got / 1e9:.2f} GB of {nbytes / 1e9:.2f} GB): "
                f"{got / t_read / 1e9:.2f} GB/s vs raw copy {got / t_raw / 1e9:.2f} GB/s "
                f"-> ratio {t_raw / t_read:.3f} (target >= 0.9)"
            )
    finally:
        store.close()


def remote_worker(rank: int, port: int, ns: str, gb: float, reps: int) -> None:
    torch.set_num_threads(1)
    kv = dist.TCPStore("127.0.0.1", port, 2, rank == 0, timeout=timedelta(seconds=120))
    specs = bench_specs(gb)
    store = GPSStore(kv, HostInfo(rank, rank, 0, (0, 1)), namespace=ns)
    try:
        store.register(_host0_only(specs))
        if rank == 0:
            store.write("m", parallel_layout("m", specs, [0], [0, 1]), fill(specs))
            kv.set("written", b"1")
            kv.wait(["measured"])
        else:
            kv.wait(["written"])
            layout = parallel_layout(
                "m", specs, [1], [0, 1]
            )  # rank 1 on host 1; data only on host 0
            out, _ = store.read("m", layout)
            got = sum(t.numel() * t.element_size() for t in out.values())
            t_read, t_raw = paired(lambda lay=layout, o=out: store.read("m", lay, out=o), got, reps)
            print(
                f"NIXL cross-host Read ({got / 1e9:.2f} GB): {got / t_read / 1e9:.2f} GB/s vs raw copy "
                f"{got / t_raw / 1e9:.2f} GB/s -> ratio {t_raw / t_read:.3f}",
                flush=True,
            )
            kv.set("measured", b"1")
    finally:
        store.close()


def _host0_only(specs):
    """GPS on host 0 alone (both processes register it), so host 1 must read over NIXL."""
    return replicated_layout("m", specs, [0])


def remote_read(gb: float, reps: int) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(remote_worker, args=(port, "gpsbench" + uuid.uuid4().hex[:6], gb, reps), nprocs=2)


def planning(reps: int) -> None:
    specs = qwen25_72b_specs()
    gps = replicated_layout("qwen2.5-72b", specs, list(range(16)))
    host_of = [r // 8 for r in range(128)]
    caller = parallel_layout("qwen2.5-72b", specs, list(range(128)), host_of, dp=16, tp=8)
    cold = []
    for _ in range(reps):
        cache = PlanCache()
        t = time.perf_counter()
        cache.get(gps, caller)
        cold.append(time.perf_counter() - t)
    t = time.perf_counter()
    n = 1000
    for _ in range(n):
        cache.get(gps, caller)
    cached = (time.perf_counter() - t) / n
    p = cache.get(gps, caller)
    print(
        f"planning 128 devices (16 hosts x 8, DP=16 TP=8) x Qwen2.5-72B ({len(specs)} tensors, "
        f"{len(p.sources)} demands): cold median {statistics.median(cold) * 1e3:.1f} ms "
        f"(min {min(cold) * 1e3:.1f}), cached {cached * 1e6:.1f} us -> {statistics.median(cold) / cached:.0f}x "
        f"(targets <= 50 ms, <= 1 ms)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--gb", type=float, default=1.0)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads; 1 keeps per-tensor copies comparable on a shared, loaded box",
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    planning(args.reps)
    local_reads(args.gb, args.reps)
    remote_read(args.gb, args.reps)


if __name__ == "__main__":
    main()
