"""The job attempt every rank agrees on, drawn through the rendezvous store.

torchrun keeps one store across the restarts of a job, so each attempt's keys (gloo's peers, the
control plane's address, GPS's records) and GPS's shm files carry the attempt in their names.
`TORCHELASTIC_RESTART_COUNT` cannot be that name on several hosts: under c10d rendezvous an
agent that restarts its workers for a membership change (another host's rank died) does not
count it, so after one death host 1 says 0 and host 2 says 1, and host 1 waits on the dead
attempt's keys until the store's timeout.

Instead global rank 0 draws the next attempt number from an atomic counter (`store.add`), and
every other rank asks for it under a nonce of its own: it posts the nonce under its rank, and
rank 0 answers under the nonce. A rank reading a stale answer is impossible (nonces are never
reused), and rank 0 keeps answering whatever nonce it finds under a rank until that rank
confirms under the new attempt's prefix, so a dead attempt's leftover nonce costs nothing. The
old attempt's ranks are gone when a new one starts (the agents stop every worker before they
rendezvous again), so nobody else answers.
"""

from __future__ import annotations

import datetime
import time
import uuid

import torch.distributed as dist

COUNTER = "pivot/attempts"


def _ask(rank: int) -> str:
    return f"pivot/attempt-ask/{rank}"


def _answer(nonce: str) -> str:
    return f"pivot/attempt-answer/{nonce}"


def _joined(attempt: int, rank: int) -> str:
    return f"pivot/attempt-{attempt}/joined/{rank}"


def agree_attempt(store: dist.Store, rank: int, world_size: int, timeout_s: float) -> int:
    """The number of this job attempt, the same on every rank (0 for a job's first start)."""
    deadline = time.monotonic() + timeout_s

    def left() -> datetime.timedelta:
        return datetime.timedelta(seconds=max(1.0, deadline - time.monotonic()))

    if rank == 0:
        attempt = int(store.add(COUNTER, 1)) - 1
        others = range(1, world_size)
        asks, joined = [_ask(r) for r in others], [_joined(attempt, r) for r in others]
        answered: dict[int, bytes] = {}
        if asks:
            store.wait(asks, left())  # every rank asked once, in this attempt or a dead one
        # a few store operations per round whatever the world size: one multi_get, one check
        while not store.check(joined):
            for r, nonce in zip(others, store.multi_get(asks)):
                if answered.get(r) != nonce:  # new (or stale: answering it is harmless)
                    store.set(_answer(nonce.decode()), str(attempt))
                    answered[r] = nonce
            if time.monotonic() > deadline:
                missing = [r for r in others if not store.check([_joined(attempt, r)])]
                raise TimeoutError(
                    f"pivot: attempt {attempt}: ranks {missing} did not join within {timeout_s:.0f} s"
                )
            time.sleep(0.05)
        return attempt
    ask = uuid.uuid4().hex
    store.set(_ask(rank), ask)
    store.wait([_answer(ask)], left())
    attempt = int(store.get(_answer(ask)))
    store.set(_joined(attempt, rank), "1")
    return attempt
