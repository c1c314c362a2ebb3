"""Heartbeats across hosts: a rank that stops answering ends the job in seconds, in one line.

On one host torchrun's agent sees every rank's exit itself. Across hosts it does not always:
under static rendezvous (`--node-rank`) a rank that dies on host 2 is never noticed on host 1,
whose ranks wait for it forever (a gloo collective, a control message). So on a multi-host job
every rank runs a `Heartbeat` thread: once a second it counts up its own key in the rendezvous
store (under the attempt's prefix), and it watches others' counters, rank 0 everyone's, every
other rank rank 0's. A counter that stays still for `timeout_s`, or a store that stops
answering, ends this process with one line naming the rank and its host; torchrun then stops
this host's ranks and restarts the job (`--max-restarts`), or ends it.

The thread has its own store connection: the main thread's may be blocked in a long wait (rank
0's start-up, a collective's rendezvous), and a heartbeat must not queue behind it. It beats
from a thread, not from the worker loop, so a long training step or GPS Read is not death; it
catches a dead process or host, or a partitioned network, not a live rank that is stuck.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from collections.abc import Callable

import torch.distributed as dist

EVERY_S = 1.0


def _beat(rank: int) -> str:
    return f"pivot/beat/{rank}"


def _host(rank: int) -> str:
    return f"pivot/beat-host/{rank}"


def _die(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
    os._exit(1)  # the main thread may be inside a collective that would never return


class Heartbeat(threading.Thread):
    def __init__(
        self,
        connect: Callable[[], dist.Store],
        *,
        rank: int,
        world_size: int,
        timeout_s: float,
        on_dead: Callable[[str], None] = _die,
    ) -> None:
        super().__init__(name="pivot-heartbeat", daemon=True)
        self.connect, self.rank, self.timeout_s, self.on_dead = connect, rank, timeout_s, on_dead
        self.watched = list(range(1, world_size)) if rank == 0 else [0]
        self._stop = threading.Event()
        self.noticed_after_s: float | None = None  # silence before the verdict (tests, docs)

    def stop(self) -> None:
        """Stop beating and watching (the job's final barrier is passed: ranks leave at will)."""
        self._stop.set()

    def run(self) -> None:
        keys = [_beat(r) for r in self.watched]
        try:
            store = self.connect()
            store.set(_host(self.rank), socket.gethostname())
            for key in keys:  # created at 0 if absent: multi_get below waits for missing keys
                store.add(key, 0)
        except Exception as e:  # noqa: BLE001 - any failure to reach the store is the verdict
            self._verdict(f"pivot: rank {self.rank}: the rendezvous store stopped answering ({e})")
            return
        seen: dict[int, tuple[int, float]] = {}  # rank -> (counter, when it last moved)
        start = time.monotonic()
        while not self._stop.is_set():
            now = time.monotonic()
            try:
                store.add(_beat(self.rank), 1)
                # one round trip for every watched rank (rank 0 watches the whole job)
                for r, raw in zip(self.watched, store.multi_get(keys)):
                    count = int(raw)
                    if seen.get(r, (0, start))[0] != count:
                        seen[r] = (count, now)
                silent = [
                    (now - seen.get(r, (0, start))[1], r)
                    for r in self.watched
                    if now - seen.get(r, (0, start))[1] > self.timeout_s
                ]
                if silent and not self._stop.is_set():
                    quiet, r = max(silent)
                    host = store.get(_host(r)).decode() if store.check([_host(r)]) else "unknown"
                    self.noticed_after_s = quiet
                    self._verdict(
                        f"pivot: rank {r} on host {host} stopped answering (no heartbeat for "
                        f"{quiet:.1f} s); ending the job so torchrun can restart it"
                    )
                    return
            except Exception as e:  # noqa: BLE001 - the store's host is gone, or the network
                if self._stop.is_set():
                    return
                self._verdict(
                    f"pivot: rank {self.rank}: the rendezvous store stopped answering ({e}); "
                    "ending the job so torchrun can restart it"
                )
                return
            self._stop.wait(EVERY_S)

    def _verdict(self, line: str) -> None:
        if not self._stop.is_set():
            self.on_dead(line)


def store_connector(prefix: str, timeout_s: float) -> Callable[[], dist.Store]:
    """A new client of the job's TCP store (MASTER_ADDR:MASTER_PORT) under `prefix`, whose every
    operation gives up after `timeout_s`."""

    def connect() -> dist.Store:
        import datetime

        raw = dist.TCPStore(
            os.environ["MASTER_ADDR"],
            int(os.environ["MASTER_PORT"]),
            is_master=False,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
        return dist.PrefixStore(prefix, raw)

    return connect
