"""One-time work on rank 0 that the other ranks wait for without a collective timeout.

Loading a 30B GenRM into GPS or profiling an engine on first use can take longer than any
collective timeout a slow or busy machine would respect (gloo's barrier gave up after 600 s
while rank 0 was still building). So the other ranks do not sit in a collective: rank 0 runs
the work and then writes its outcome under a key of the rendezvous store; the others poll that
key (a non-blocking `check`), printing how long they have waited, for as long as it takes. If
rank 0 dies instead, torchrun stops every rank, so no wait outlives its job.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import TypeVar

import torch.distributed as dist

T = TypeVar("T")
OK = "ok"
ERROR = "error: "
POLL_S = 0.2
REPORT_EVERY_S = 30.0


class Rank0Failed(RuntimeError):
    """Rank 0's one-time work failed; rank 0 has said why (one line on stderr)."""


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run_on_rank0(
    store: dist.Store,
    rank: int,
    key: str,
    what: str,
    work: Callable[[], T],
    expected: tuple[type[BaseException], ...] = (OSError, ValueError),
    report_every_s: float = REPORT_EVERY_S,
    announce: bool = True,
) -> T | None:
    """Rank 0 runs `work()` and returns its result; every other rank returns None once it is done.

    An `expected` error on rank 0 is a bad input: rank 0 prints `pivot: cannot start: <why>`
    and every rank, rank 0 included, raises `Rank0Failed`, so the job stops in one line. Any
    other error is a bug: the waiting ranks are released the same way and rank 0 re-raises it
    with its traceback. `key` must be unique per phase within one attempt of the job."""
    full_key = f"pivot-rank0/{key}"
    if rank == 0:
        try:
            result = work()
        except expected as e:
            store.set(full_key, ERROR + str(e))
            _say(f"pivot: cannot start: {e}")
            raise Rank0Failed(str(e)) from e
        except BaseException as e:
            store.set(full_key, ERROR + f"{type(e).__name__}: {e}")
            raise
        store.set(full_key, OK)
        return result
    wait_for(store, full_key, what, reporter=rank == 1 and announce, report_every_s=report_every_s)
    return None


def wait_for(
    store: dist.Store, full_key: str, what: str, reporter: bool, report_every_s: float
) -> None:
    """Poll `full_key` until rank 0 writes it; raise `Rank0Failed` if it wrote an error."""
    start = next_report = time.monotonic()
    next_report += report_every_s
    while not store.check([full_key]):
        time.sleep(POLL_S)
        now = time.monotonic()
        if reporter and now >= next_report:
            _say(f"pivot: waiting for rank 0 ({what}): {now - start:.0f} s so far, no time limit")
            next_report = now + report_every_s
    outcome = store.get(full_key).decode()
    if outcome != OK:
        raise Rank0Failed(outcome[len(ERROR) :])
