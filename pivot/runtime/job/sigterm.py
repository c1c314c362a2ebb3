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


def on_sigterm(last_act: Callable[[], None]) -> Callable[[], None]:
    """From now on a SIGTERM runs `last_act` (once, from whichever thread sees it first) and
    ends the process with exit code 143. Call from the main thread. Returns what undoes it
    (the previous handler and wakeup fd back, the watching thread ended), also from the main
    thread."""
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
        os.close(read_end)
        if woken:
            act()

    def on_signal(*_: object) -> None:
        # not `act()` here: the handler runs in the main thread between two of its bytecodes,
        # maybe inside a write to stdout or stderr, where the last act's own write would raise
        # "reentrant call"; a thread of its own writes after the main thread's write ends
        threading.Thread(target=act, name="pivot-sigterm-act", daemon=True).start()

    handler = signal.signal(signal.SIGTERM, on_signal)
    wakeup_fd = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    watcher = threading.Thread(target=watch, name="pivot-sigterm", daemon=True)
    watcher.start()

    def undo() -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if handler is None else handler)
        signal.set_wakeup_fd(wakeup_fd)
        os.close(write_end)  # the watcher reads the end of the pipe and returns
        watcher.join()

    return undo
