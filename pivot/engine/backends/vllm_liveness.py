"""A dead vLLM engine core, turned into an error where the adapter waits on it.

vLLM 0.32.0's multiprocess client notices an engine-core process that exits: its monitor thread
marks the client dead and shuts it down (v1/engine/core_client.py:811-827). The shutdown stops
the thread that fills the client's output queue (947-979: it `break`s without a word), so a
`step()` already waiting in `get_output` (989-993) waits forever, and so does a utility call
(`call_utility`, 1009-1015: a future nothing will set). Measured with the CPU build: a SIGKILLed
engine core hung the whole job. `watch_engine_core` waits on the core processes itself and, when
one exits, puts vLLM's own `EngineDeadError` where those calls wait: the output queue (the path
vLLM uses to forward its output thread's errors, 972) and every pending utility future. The
adapter then raises instead of hanging, and the inference role recovers (`InferenceRole.fail`).
"""

from __future__ import annotations

import logging
import threading
from multiprocessing import connection
from typing import Any

log = logging.getLogger(__name__)


def watch_engine_core(llm_engine: Any) -> threading.Event | None:
    """Start a daemon thread that fails the waits of `llm_engine` (a vLLM `LLMEngine`) once one of
    its engine-core processes exits; returns the event that stops the watch (set it before a
    deliberate shutdown), or None for an in-process core (nothing to watch)."""
    client = llm_engine.engine_core
    resources = getattr(client, "resources", None)
    manager = getattr(resources, "engine_manager", None)
    if resources is None or manager is None:
        return None
    sentinels = list(manager.sentinels())
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            if connection.wait(sentinels, timeout=0.5):
                break
        if stop.is_set():
            return
        from vllm.v1.engine.exceptions import EngineDeadError

        log.warning("vLLM engine core exited (%s)", manager.finished_procs())
        resources.engine_dead = True  # later calls raise at once (`ensure_alive`, 785-787)
        for future in list(client.utility_results.values()):
            if not future.done():
                future.set_exception(EngineDeadError())
        client.outputs_queue.put_nowait(EngineDeadError())

    threading.Thread(target=watch, daemon=True, name="pivot-vllm-core-watch").start()
    return stop
