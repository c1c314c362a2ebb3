"""A rank's last act when torchrun SIGTERMs it (another rank failed, or the job was cancelled).

A Python signal handler runs only once the main thread is back in the interpreter, which a rank
blocked in a collective may not be before torchrun's SIGKILL follows. So the signal also wakes
a thread of its own (`signal.set_wakeup_fd`: the C-level handler writes the signal's number to
a pipe at once, whatever the main thread is doing), which acts and ends the process. The Python
handler does the same, for when the wakeup fd was taken by something else (an asyncio loop in
the main thread installs its own): whichever comes first acts, once.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Callable

EXIT_CODE = 128 + signal.SIGTERM


def on_sigterm(last_act: Callable[[], None]) -> None:
    """From now on a SIGTERM runs `last_act` (once, from whichever thread sees it first) and
    ends the process with exit code 143. Call from the main thread."""
    once = threading.Lock()

    def act() -> None:
        if not once.acquire(blocking=False):
            return  # the other path is acting: it ends the process
        try:
            last_act()
        finally:
            os._exit(EXIT_CODE)

    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)

    def watch() -> None:
        while True:
            woken = os.read(read_end, 64)
            if not woken or signal.SIGTERM in woken:
                break
        if woken:
            act()

    signal.signal(signal.SIGTERM, lambda *_: act())
    signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    threading.Thread(target=watch, name="pivot-sigterm", daemon=True).start()
