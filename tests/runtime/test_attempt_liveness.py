"""The attempt id every rank agrees on, past a dead attempt's leftovers in the store, and the
heartbeats that name a rank that stopped answering. Ranks are threads on one TCPStore."""

from __future__ import annotations

import datetime
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch.distributed as dist

from pivot.runtime.job.attempt import _ask, agree_attempt
from pivot.runtime.job.liveness import Heartbeat


@pytest.fixture
def server() -> dist.TCPStore:
    return dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)


def client(server: dist.TCPStore) -> dist.TCPStore:
    return dist.TCPStore(
        "127.0.0.1", server.port, is_master=False, timeout=datetime.timedelta(seconds=30)
    )


def agree(server: dist.TCPStore, ranks: list[int], world: int) -> list[int]:
    with ThreadPoolExecutor(len(ranks)) as pool:
        return list(pool.map(lambda r: agree_attempt(client(server), r, world, 30), ranks))


def test_every_attempt_agrees_and_never_reuses_a_dead_ones_id(server: dist.TCPStore) -> None:
    assert agree(server, [0, 1, 2, 3], 4) == [0, 0, 0, 0]
    # an attempt killed during start-up: rank 0 drew 1, rank 2 had asked, nobody was answered
    s = client(server)
    s.add("pivot/attempts", 1)
    s.set(_ask(2), "deadbeef")
    # the next attempt: every rank restarted; they agree on 2 whatever order they come in
    assert agree(server, [3, 1, 0, 2], 4) == [2, 2, 2, 2]
    assert agree(server, [0, 1, 2, 3], 4) == [3, 3, 3, 3]


@pytest.mark.slow
def test_a_silent_rank_is_named_within_seconds(server: dist.TCPStore) -> None:
    verdicts: list[tuple[float, str]] = []
    t0 = time.monotonic()
    beats = [
        Heartbeat(
            lambda: dist.PrefixStore("a0", client(server)),
            rank=r,
            world_size=3,
            timeout_s=3.0,
            on_dead=lambda line: verdicts.append((time.monotonic() - t0, line)),
        )
        for r in range(3)
    ]
    for b in beats:
        b.start()
    time.sleep(2.5)
    killed = time.monotonic() - t0
    beats[2].stop()  # rank 2 goes silent (as if SIGKILLed)
    deadline = time.monotonic() + 20
    while not verdicts and time.monotonic() < deadline:
        time.sleep(0.1)
    for b in beats:
        b.stop()
    assert verdicts, "nobody noticed"
    when, line = verdicts[0]
    assert line.startswith("pivot: rank 2 on host ") and "stopped answering" in line, line
    assert when - killed <= 10.0  # a generous bound (the timeout is 3 s): it only guards a hang
    assert beats[0].noticed_after_s is not None and beats[1].noticed_after_s is None


def test_a_vanished_store_ends_the_watcher(server: dist.TCPStore) -> None:
    said = threading.Event()
    lines: list[str] = []
    beat = Heartbeat(
        lambda: client(server),
        rank=1,
        world_size=2,
        timeout_s=3.0,
        on_dead=lambda line: (lines.append(line), said.set()),
    )
    beat.start()
    assert said.wait(20)  # rank 0 never beats: its silence is the verdict
    beat.stop()
    assert lines[0].startswith("pivot: rank 0 on host unknown stopped answering"), lines
