"""The multi-rank tests' processes, forked from a server that imported torch once per test process.

`torch.multiprocessing.spawn` starts each rank as a new interpreter, which imports torch, FSDP,
dynamo, Pivot and the test's module again: about 2.5 CPU-s a rank, 5 of a two-rank trainer test's
7 (four trainer tests: 35.1 -> 14.4 CPU-s, this 2-core machine, 2026-12-07). Python's forkserver
start method keeps one server process per test process that imports the modules below once and
forks each rank from it. A rank is still a fresh process: the server imported modules and ran
nothing (no thread, no process group, no model), and each rank unpickles its function and
arguments and imports the test's module as a spawned one would, with the parent's sys.path.

One difference from spawn: a rank inherits the environment the server started with (the first
multi-rank test's), not the test's at the call, so a test hands its ranks what they need as
arguments, never through os.environ set in the parent. Pivot's own processes (torchrun's ranks,
vLLM's engines, the tools) start as users start them; only the tests' harnesses use this.
"""

from __future__ import annotations

import multiprocessing
import resource
from collections.abc import Callable
from multiprocessing.context import BaseContext
from typing import Any

import torch.multiprocessing as mp

PRELOAD = [
    "torch",
    "torch.distributed.fsdp",  # a training rank's FSDP2, which imports dynamo
    "torch._dynamo",
    "pivot.model",
    "pivot.engine",
    "pivot.roles.trainer",
    "pivot.gps.store",
    "pytest",  # every test module imports it
]
"""What the server imports before it forks a rank; a module that fails to import is skipped."""

cpu_s = 0.0
"""CPU seconds of the ranks this process forked and joined, with their own children's: their parent
is the server, not the test, so the per-test CPU of PIVOT_TEST_CPU (tests/conftest.py) adds this."""


def context() -> BaseContext:
    """The forkserver context, its preload set before the server starts (a no-op after)."""
    multiprocessing.set_forkserver_preload(PRELOAD)
    return multiprocessing.get_context("forkserver")


def spawn(fn: Callable[..., None], args: tuple[Any, ...] = (), nprocs: int = 1) -> None:
    """`torch.multiprocessing.spawn`'s contract, ranks forked from the server: `fn(i, *args)` for
    i in 0..nprocs-1, joined; a rank's exception (or death) fails the caller with its traceback."""
    global cpu_s
    spent = context().SimpleQueue()
    try:
        mp.start_processes(
            _counted, args=(fn, spent, *args), nprocs=nprocs, join=True, start_method="forkserver"
        )
    finally:
        while not spent.empty():
            cpu_s += spent.get()


def _counted(i: int, fn: Callable[..., None], spent: Any, *args: Any) -> None:
    try:
        fn(i, *args)
    finally:
        own, kids = (
            resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
        )
        spent.put(own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime)
