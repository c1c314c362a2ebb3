"""GPS torn-read stress: one writer publishes new versions of a model as fast as it can while
readers on other processes Read it continuously, for a fixed time. Every version's content is a
function of its version number (`content`), so each reader checks every read on its own: the
bytes it got must be exactly the content of the version the store says it returned.

    python tools/stress_gps.py [--seconds 20] [--readers 4] [--tp 2] [--mb 32]

Prints reads, versions published and torn reads (must be 0; exit code 1 otherwise), and the
readers' throughput next to a plain memcpy of the same bytes timed in the same processes during
the run (interleaved with the reads, so both see the same load).
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing.queues
import socket
import statistics
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pivot.gps.layout import parallel_layout, replicated_layout  # noqa: E402
from pivot.gps.spec import TensorSpec, model_bytes, qwen2_specs  # noqa: E402
from pivot.gps.store import GPSStore, HostInfo  # noqa: E402
from pivot.gps.torch_specs import TORCH_DTYPES  # noqa: E402

# bit patterns per element size; the top two bits stay clear so no pattern is NaN or Inf
BITS = {2: (torch.int16, 0x3FFF), 4: (torch.int32, 0x3FFFFFFF)}
QUIET_READS = 5


def stress_specs(mb: float, dtype: str) -> list[TensorSpec]:
    """A Qwen2-shaped tensor list of about `mb` MB (many tensors of several shapes)."""
    hidden = 256
    per_layer = 2 * (4 * hidden * hidden + 3 * hidden * 4 * hidden)
    layers = max(1, round(mb * 1e6 / per_layer))
    return qwen2_specs(layers, hidden, 4 * hidden, 4, 2, 64, 1024, dtype=dtype)


class Content:
    """Version v of the k-th tensor: element i holds the bit pattern
    (((i * 2654435761 + k * 7919) & mask) + v) & mask, viewed as the tensor's dtype. Versions
    v and v + 2 (the same slot) differ in every element, so a copy mixing them never passes."""

    def __init__(self, specs: list[TensorSpec]) -> None:
        self.base = {}
        for k, s in enumerate(specs):
            int_dtype, mask = BITS[s.itemsize]
            idx = torch.arange(math.prod(s.shape), dtype=torch.int64)
            self.base[s.name] = ((idx * 2654435761 + k * 7919) & mask).to(int_dtype).view(s.shape)
        self.specs = {s.name: s for s in specs}

    def bits(
        self, name: str, version: int, box: tuple[tuple[int, int], ...] | None = None
    ) -> torch.Tensor:
        base = self.base[name]
        if box is not None:
            base = base[tuple(slice(lo, hi) for lo, hi in box)]
        _, mask = BITS[self.specs[name].itemsize]
        return (base + (version & mask)) & mask  # both terms <= mask: no overflow in the int type

    def tensor(self, name: str, version: int) -> torch.Tensor:
        return self.bits(name, version).view(TORCH_DTYPES[self.specs[name].dtype])

    def matches(self, got: dict[str, torch.Tensor], version: int, boxes: dict[str, tuple]) -> bool:
        """True when every tensor of a read is exactly version `version`'s content."""
        for name, t in got.items():
            int_dtype, _ = BITS[self.specs[name].itemsize]
            if not torch.equal(t.view(int_dtype), self.bits(name, version, boxes[name])):
                return False
        return True


@dataclass
class ReaderReport:
    reads: int
    torn: int
    backwards: int  # reads that reported an older version than the reader's previous read
    first_version: int
    last_version: int
    nbytes: int  # of one read (this reader's slices)
    read_s: list[float]  # each read's time while the writer publishes (retries included)
    memcpy_s: list[float]  # each reference copy's time, one after every read
    quiet_s: list[float]  # reads after the writer stopped: the copy alone, for comparison


def _writer(
    store: GPSStore,
    kv: dist.Store,
    specs: list[TensorSpec],
    host_of: tuple[int, ...],
    content: Content,
    seconds: float,
) -> None:
    full = parallel_layout("m", specs, [0], host_of)
    version = store.write("m", full, {s.name: content.tensor(s.name, 1) for s in specs})
    kv.set("go", b"1")
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        version = store.write(
            "m", full, {s.name: content.tensor(s.name, version + 1) for s in specs}
        )
    kv.set("stop", str(version).encode())


def _reader(
    store: GPSStore,
    kv: dist.Store,
    specs: list[TensorSpec],
    host_of: tuple[int, ...],
    content: Content,
    tp: int,
) -> ReaderReport:
    readers = list(range(1, len(host_of)))
    layout = parallel_layout("m", specs, readers, host_of, dp=len(readers) // tp, tp=tp)
    boxes = {name: piece.box for name, _, piece in layout.held_by(store.info.place)}
    kv.wait(["go"])
    out, first = store.read("m", layout)
    nbytes = sum(t.numel() * t.element_size() for t in out.values())
    src, dst = torch.ones(nbytes, dtype=torch.uint8), torch.ones(nbytes, dtype=torch.uint8)
    r = ReaderReport(0, 0, 0, first, first, nbytes, [], [], [])
    last = first
    while not kv.check(["stop"]):
        t0 = time.perf_counter()
        out, version = store.read("m", layout, out=out)  # the latest published version
        r.read_s.append(time.perf_counter() - t0)
        r.reads += 1
        r.torn += not content.matches(out, version, boxes)
        r.backwards += version < last
        last = r.last_version = version
        t0 = time.perf_counter()  # the reference, interleaved read for read: same load
        dst.copy_(src)
        r.memcpy_s.append(time.perf_counter() - t0)
    for _ in range(QUIET_READS):
        t0 = time.perf_counter()
        out, version = store.read("m", layout, out=out)
        r.quiet_s.append(time.perf_counter() - t0)
        r.torn += not content.matches(out, version, boxes)
    return r


def _worker(
    rank: int,
    world: int,
    port: int,
    ns: str,
    args: argparse.Namespace,
    failures: multiprocessing.queues.SimpleQueue[int],
) -> None:
    torch.set_num_threads(1)
    kv = dist.TCPStore(
        "127.0.0.1", port, world, rank == 0, timeout=timedelta(seconds=args.seconds + 120)
    )
    host_of = (0,) * world
    specs = stress_specs(args.mb, args.dtype)
    content = Content(specs)
    store = GPSStore(kv, HostInfo(rank, 0, rank, host_of), namespace=ns)
    try:
        store.register(replicated_layout("m", specs, [0]))
        if rank == 0:  # the writer hosts the kv store and owns the buffer: it finishes last
            _writer(store, kv, specs, host_of, content, args.seconds)
            kv.wait([f"report/{r}" for r in range(1, world)])
            failures.put(_summary(kv, world, specs, args))
        else:
            kv.set(
                f"report/{rank}",
                json.dumps(asdict(_reader(store, kv, specs, host_of, content, args.tp))).encode(),
            )
    finally:
        store.close()


def _summary(kv: dist.Store, world: int, specs: list[TensorSpec], args: argparse.Namespace) -> int:
    """Print the figures; returns the number of failed reads (torn or going back in time)."""
    reports = [ReaderReport(**json.loads(kv.get(f"report/{r}"))) for r in range(1, world)]
    versions = int(kv.get("stop"))
    reads, torn = sum(r.reads for r in reports), sum(r.torn for r in reports)
    # medians over every sample: a process descheduled mid-copy on a loaded host skews a mean
    read_gbs, copy_gbs, quiet_gbs = (
        statistics.median(r.nbytes / t for r in reports for t in getattr(r, times)) / 1e9
        for times in ("read_s", "memcpy_s", "quiet_s")
    )
    print(
        f"GPS torn-read stress: 1 writer, {world - 1} readers (TP={args.tp}), {args.seconds:.1f} s, "
        f"model {model_bytes(specs) / 1e6:.1f} MB ({len(specs)} {args.dtype} tensors), host-local shm"
    )
    print(f"versions published: {versions} ({versions / args.seconds:.1f}/s)")
    print(
        f"reads: {reads} ({reads / args.seconds:.1f}/s), each compared with its version's content; "
        f"versions seen per reader: {[r.last_version - r.first_version + 1 for r in reports]} (span)"
    )
    print(f"torn reads: {torn}")
    print(f"version went backwards: {sum(r.backwards for r in reports)}")
    print(
        f"read (median per reader) {read_gbs:.2f} GB/s while versions are published, {quiet_gbs:.2f} GB/s "
        f"after the writer stopped, vs memcpy of the same bytes {copy_gbs:.2f} GB/s (same processes, same run) "
        f"-> ratios {read_gbs / copy_gbs:.3f} and {quiet_gbs / copy_gbs:.3f}",
        flush=True,
    )
    return torn + sum(r.backwards for r in reports)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--seconds", type=float, default=20.0, help="how long the writer keeps publishing"
    )
    ap.add_argument("--readers", type=int, default=4, help="reader processes")
    ap.add_argument(
        "--tp",
        type=int,
        default=2,
        help="readers form replicas of this TP size (each reads its slices)",
    )
    ap.add_argument("--mb", type=float, default=32.0, help="model size in MB")
    ap.add_argument("--dtype", choices=["bfloat16", "float32"], default="bfloat16")
    args = ap.parse_args(argv)
    if args.readers < 1 or args.readers % args.tp:
        ap.error(f"--readers {args.readers} must be a positive multiple of --tp {args.tp}")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    world = args.readers + 1
    ns = "gpsstress" + uuid.uuid4().hex[:6]
    failures = mp.get_context("spawn").SimpleQueue()
    mp.spawn(_worker, args=(world, port, ns, args, failures), nprocs=world)
    return 1 if failures.get() else 0


if __name__ == "__main__":
    raise SystemExit(main())
