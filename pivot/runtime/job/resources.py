"""Everything a rank holds for its job, and the one way it lets go of it.

`JobResources` is a stack: `launch.run` pushes each resource as it takes it (the process groups,
the heartbeat, the run folder's lock, GPS and its shared memory, the last barrier, rank 0's
controller thread, the engines, the control plane) with how to let go of it, and every way out
of the job releases what is held, newest first. How depends on the way out:

- clean (`close`, or the `with` block left without an exception): every rank reached the same
  point (the worker loop ended on Stop, or every rank agreed the input is bad), so a release may
  wait on the peers: the last barrier runs, the controller thread is joined, the process groups
  are destroyed.
- failed (the block left by an exception, a Ctrl-C's included, or a clean release that raised):
  this rank's peers may be dead, or inside a collective this rank never joins, so no step that
  waits on a peer runs: the last barrier would hang until its timeout, the controller waits for
  messages from ranks that are gone, and NCCL's destroy waits for work in flight; the process
  groups are aborted instead. Local releases still run (engines, control plane, GPS's files, the
  lock); torchrun stops the other ranks.
- ending (torchrun's SIGTERM, a heartbeat's verdict; from another thread): the main thread may be
  anywhere, inside a collective, an engine step or a release, so only what is safe beside it runs
  (unlinking GPS's shared memory, which would outlive the process; the kernel frees the rest),
  then the process ends at once (`os._exit`: pivot/runtime/job/sigterm.py).

A torchrun restart is a new process: what an attempt ended by SIGKILL left in /dev/shm is swept
by the next one (`launch.gps_store`).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import NoReturn

from pivot.runtime.job.sigterm import on_sigterm

log = logging.getLogger(__name__)

Act = Callable[[], object]
"""A release: what it returns is not looked at."""


@dataclass(frozen=True, kw_only=True)
class Release:
    """How one resource is let go of on each way out; None: not on that one."""

    what: str
    clean: Act | None
    failed: Act | None
    ending: Act | None


class JobResources:
    """The stack of what a rank holds (see the module docstring); a context manager that, on
    entry, routes a SIGTERM through the stack."""

    def __init__(self) -> None:
        self._held: list[Release] = []
        # the main thread and the one a SIGTERM wakes both take from the stack; reentrant: the
        # Python-level SIGTERM handler runs in the main thread, maybe while it holds the lock
        self._lock = threading.RLock()
        self._last_word: Act | None = None
        self._undo_sigterm: Act | None = None

    def __enter__(self) -> JobResources:
        if threading.current_thread() is threading.main_thread():  # where signals are handled
            self._undo_sigterm = on_sigterm(self._sigterm)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        try:
            failure = self._release(failed=kind is not None)
        finally:
            if self._undo_sigterm is not None:
                self._undo_sigterm()
                self._undo_sigterm = None
        if failure is not None and kind is None:
            raise failure
        # with an exception already on its way out, a release's own error is logged, not raised

    def hold(
        self, what: str, *, clean: Act | None, failed: Act | None = None, ending: Act | None = None
    ) -> None:
        """From now on `what` is released on a clean end by `clean`, after a failure by
        `failed` and when the process ends from another thread by `ending` (None: nothing to do
        on that way out, or nothing that is safe)."""
        with self._lock:
            self._held.append(Release(what=what, clean=clean, failed=failed, ending=ending))

    def close(self) -> None:
        """Release everything now, cleanly: a stop every rank agreed on, before a rank lingers
        (pivot/bad_input.py) or leaves."""
        failure = self._release(failed=False)
        if failure is not None:
            raise failure

    def say_on_sigterm(self, last_word: Act) -> None:
        """What this rank says when a SIGTERM ends it, once its resources are let go of."""
        self._last_word = last_word

    def end_now(self, line: str, code: int = 1) -> NoReturn:
        """End the process from any thread, now (a heartbeat's verdict): `line` on stderr, what
        is safe released, exit `code` (the main thread may be inside a collective that would
        never return)."""
        print(line, file=sys.stderr, flush=True)
        self._release_ending()
        os._exit(code)

    def _release(self, failed: bool) -> BaseException | None:
        """Release every held resource, newest first; returns the first error a release raised
        (the others still ran)."""
        first: BaseException | None = None
        while True:
            with self._lock:
                if not self._held:
                    return first
                step = self._held[-1]  # left on the stack while it runs: a SIGTERM meanwhile
                # still runs its `ending` (freeing GPS's files twice is harmless)
            act = step.failed if failed else step.clean
            try:
                if act is not None:
                    act()
            except BaseException as e:  # the next releases still run; a Ctrl-C's included
                log.warning("releasing %s failed: %s", step.what, e, exc_info=True)
                first = first or e
                failed = True  # a peer may be left waiting: nothing after this waits on one
            finally:
                with self._lock:
                    if self._held and self._held[-1] is step:
                        self._held.pop()

    def _release_ending(self) -> None:
        with self._lock:
            steps, self._held = self._held, []
        for step in reversed(steps):
            if step.ending is not None:
                try:
                    step.ending()
                except Exception:  # noqa: BLE001 - the process ends anyway; the next still run
                    log.warning("releasing %s failed", step.what, exc_info=True)

    def _sigterm(self) -> None:
        """torchrun's SIGTERM: let go of what is safe, say the last word (sigterm.py ends the
        process)."""
        self._release_ending()
        if self._last_word is not None:
            self._last_word()
