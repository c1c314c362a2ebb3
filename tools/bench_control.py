"""Control-plane cost, old path vs new path, in one run.

old: pickled dataclasses over zmq ROUTER/DEALER (Pivot before docs/security.md; rebuilt here as
     the reference: pickle.dumps / pickle.loads, the rank as zmq identity)
new: pivot/runtime/control/control_plane.py's endpoints: typed MessagePack (msgspec), HMAC-SHA256 tag, sequence check

Both ends live in this process on loopback, so every number includes both sides' CPU.
Measured: round trips (controller -> worker AbortSequences, worker -> controller Stats), and
one-way throughput of small (Stats), large (Finished with 32 outputs x 512 tokens) and training
(TrainStep, 256 rows x 1024 tokens) messages. Every line prints new/old.

    python tools/bench_control.py [--round-trips 2000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch.distributed as dist  # noqa: E402
import zmq  # noqa: E402

from pivot.dist import ClusterSpec  # noqa: E402
from pivot.engine.sequence import EngineStats, Output  # noqa: E402
from pivot.rl.batch import TrainBatch  # noqa: E402
from pivot.runtime.control import messages as m  # noqa: E402
from pivot.runtime.control.control_plane import ControllerEndpoint, WorkerEndpoint  # noqa: E402


class PickleController:
    def __init__(self) -> None:
        self.sock = zmq.Context.instance().socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.address = f"tcp://127.0.0.1:{self.sock.bind_to_random_port('tcp://127.0.0.1')}"

    def send(self, rank: int, msg: object) -> None:
        self.sock.send_multipart(
            [str(rank).encode(), pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL)]
        )

    def recv(self, timeout_ms: int) -> tuple[int, object] | None:
        if not self.sock.poll(timeout_ms):
            return None
        ident, payload = self.sock.recv_multipart()
        return int(ident), pickle.loads(payload)


class PickleWorker:
    def __init__(self, addr: str, rank: int) -> None:
        self.sock = zmq.Context.instance().socket(zmq.DEALER)
        self.sock.setsockopt(zmq.IDENTITY, str(rank).encode())
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(addr)

    def send(self, msg: object) -> None:
        self.sock.send(pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))

    def recv_all(self, timeout_ms: int) -> list[object]:
        out: list[object] = []
        if self.sock.poll(timeout_ms):
            while self.sock.poll(0):
                out.append(pickle.loads(self.sock.recv()))
        return out


def pair(path: str) -> tuple[object, object]:
    if path == "old":
        ctrl = PickleController()
        worker = PickleWorker(ctrl.address, 1)
    else:
        os.environ.setdefault("PIVOT_JOB_SECRET", "bench-control-secret-0123456789")
        store = dist.HashStore()
        ctrl = ControllerEndpoint(store, ClusterSpec(2, 0, 2))
        worker = WorkerEndpoint(store, 1)
    worker.send(m.Hello(1, 0))
    assert ctrl.recv(5000) is not None
    return ctrl, worker


def stats_msg() -> m.Stats:
    return m.Stats(
        1,
        "rollout",
        0,
        EngineStats(64, 40000, 100000, 200000, 123456, 0.012, 3),
        time.time(),
        {i: 100 + i for i in range(64)},
    )


def finished_msg() -> m.Finished:
    outs = [
        Output(i, list(range(128)), list(range(512)), [-0.5] * 512, "stop", 3) for i in range(32)
    ]
    return m.Finished(1, "rollout", 0, outs)


def train_msg() -> m.TrainStep:
    rows = 256
    # distinct rows: pickle would send a list repeated by reference only once
    return m.TrainStep(
        1,
        TrainBatch(
            [list(range(r, r + 256)) for r in range(rows)],
            [list(range(r, r + 1024)) for r in range(rows)],
            [0.5] * rows,
            [[-0.5 - r] * 1024 for r in range(rows)],
        ),
    )


def round_trips(ctrl: object, worker: object, n: int) -> float:
    """Seconds per round trip."""
    ask, reply = m.AbortSequences(0, [1, 2, 3]), stats_msg()
    t0 = time.perf_counter()
    for _ in range(n):
        ctrl.send(1, ask)
        while not worker.recv_all(1000):
            pass
        worker.send(reply)
        while ctrl.recv(1000) is None:
            pass
    return (time.perf_counter() - t0) / n


def upstream(ctrl: object, worker: object, msg: object, n: int, burst: int = 50) -> float:
    """Messages per second, worker -> controller."""
    t0 = time.perf_counter()
    sent = 0
    while sent < n:
        k = min(burst, n - sent)
        for _ in range(k):
            worker.send(msg)
        for _ in range(k):
            while ctrl.recv(1000) is None:
                pass
        sent += k
    return n / (time.perf_counter() - t0)


def downstream(ctrl: object, worker: object, msg: object, n: int) -> float:
    """Messages per second, controller -> worker."""
    t0 = time.perf_counter()
    for _ in range(n):
        ctrl.send(1, msg)
        got: list[object] = []
        while not got:
            got = worker.recv_all(1000)
    return n / (time.perf_counter() - t0)


def codec_only(path: str, msg: object, n: int) -> float:
    """Seconds to encode and decode one frame, no socket: the CPU the secure path adds."""
    if path == "old":
        t0 = time.perf_counter()
        for _ in range(n):
            pickle.loads(pickle.dumps(msg, protocol=pickle.HIGHEST_PROTOCOL))
        return (time.perf_counter() - t0) / n
    from pivot.runtime.control import frames

    key = frames.session_key(b"bench-control-secret-0123456789", bytes(16))
    sealer, opener = (
        frames.Sealer(key, frames.TO_CONTROLLER, 1),
        frames.Opener(key, frames.TO_CONTROLLER, None, 2),
    )
    t0 = time.perf_counter()
    for _ in range(n):
        opener.open(sealer.seal(0, msg))
    return (time.perf_counter() - t0) / n


def best(fn: Callable[[], float], repeats: int, lower_is_better: bool) -> float:
    values = [fn() for _ in range(repeats)]
    return min(values) if lower_is_better else max(values)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--round-trips", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    ends = {path: pair(path) for path in ("old", "new")}

    def path_of(ctrl: object) -> str:
        return "old" if isinstance(ctrl, PickleController) else "new"

    n = args.round_trips
    cases: list[tuple[str, Callable[[object, object], float], bool, str]] = [
        (
            "codec only, AbortSequences (per frame)",
            lambda c, w: codec_only(path_of(c), m.AbortSequences(0, [1, 2, 3]), n * 5),
            True,
            "us",
        ),
        (
            "codec only, Stats (per frame)",
            lambda c, w: codec_only(path_of(c), stats_msg(), n),
            True,
            "us",
        ),
        ("round trip (AbortSequences -> Stats)", lambda c, w: round_trips(c, w, n), True, "us"),
        (
            "Stats up (64 progress entries)",
            lambda c, w: upstream(c, w, stats_msg(), n),
            False,
            "msg/s",
        ),
        (
            "Finished up (32 x 512 tokens)",
            lambda c, w: upstream(c, w, finished_msg(), max(n // 20, 20)),
            False,
            "msg/s",
        ),
        (
            "TrainStep down (256 x 1024 tokens)",
            lambda c, w: downstream(c, w, train_msg(), max(n // 400, 3)),
            False,
            "msg/s",
        ),
    ]
    print(f"{'case':40s} {'old':>12s} {'new':>12s} {'new/old':>8s}")
    for name, fn, lower, unit in cases:
        got = {}
        for _ in range(args.repeats):  # interleave the paths so drifting CPU load hits both alike
            for path, (c, w) in ends.items():
                got.setdefault(path, []).append(fn(c, w))
        old, new = (min(got[p]) if lower else max(got[p]) for p in ("old", "new"))
        scale = 1e6 if unit == "us" else 1.0
        print(
            f"{name:40s} {old * scale:10.1f}{unit:>2s} {new * scale:10.1f}{unit:>2s} {new / old:8.2f}"
            f"   (spread new {statistics.pstdev(got['new']) / statistics.mean(got['new']):.0%})"
        )
    print(
        "new/old: time ratio for us rows (below 1 is faster), rate ratio for msg/s rows (above 1 is faster)"
    )


if __name__ == "__main__":
    main()
