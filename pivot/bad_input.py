"""How a rank stops on bad input (a config error, a missing file, a kernel not installed): one
line per problem from the rank that speaks (rank 0), exit code 2, no traceback, and torchrun's
failure summary naming Pivot's line as the root cause whichever rank it saw end first.

torchrun gives each worker a file to explain its failure in (TORCHELASTIC_ERROR_FILE). A rank
that leaves none shows in the summary as "To enable traceback see: https://pytorch.org/docs/...",
which is all a user saw when a silent rank ended before rank 0 had spoken: the agent SIGTERMs
the others as soon as one rank ends. So every rank that stops here writes its lines there, a
silent rank after lingering a moment, so that rank 0 (which has said them on stderr) is the one
torchrun sees end, and names as the root cause. Nothing here imports torch: cli.py uses it
before torch is loaded.

The config tree's error (`ConfigError`) and its one check live here too: every config section
(`pivot/config/`, and `pivot/engine/config.py`, which the tree imports) raises it, so it lies
below both.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence

EXIT_CODE = 2
"""What every rank exits with on bad input (`python pivot/main.py` and `--dry-run` return it to
the shell; torchrun itself exits 1 whatever its workers' codes are)."""
LINGER_S = 5.0
"""How long a silent rank waits before it ends: rank 0 runs the same checks at about the same
time and ends first, then torchrun SIGTERMs the rest at once (this is no delay when it does);
if rank 0 is slower still, the silent rank's own error file names the problem."""


def tell(text: str) -> None:
    """`text` and its newline to stderr in one write: a write of under PIPE_BUF (4096) bytes to
    the pipe torchrun's agent and every rank share is never split, so no other process's output
    lands inside a line (print's separate newline write let it, before the line's end)."""
    sys.stderr.write(text + "\n")
    sys.stderr.flush()


def this_rank() -> int:
    """The global rank torchrun gave this process; 0 when run alone (`python pivot/main.py`)."""
    return int(os.environ.get("RANK", "0"))


def record_for_torchrun(lines: Sequence[str]) -> None:
    """Write `lines` to this worker's TORCHELASTIC_ERROR_FILE (nothing when not under torchrun).

    torch's own writer, `ErrorHandler.record_exception`
    (torch/distributed/elastic/multiprocessing/errors/error_handler.py:69-87 in torch 2.13),
    takes an exception and puts `traceback.format_exc()` in `py_callstack`, which is what the
    summary prints (`ChildFailedError._format_failure`, errors/__init__.py:289-295), so it cannot
    say a line without a traceback. This writes the same JSON layout with Pivot's lines as the
    callstack; its `timestamp` (seconds) is what the agent orders failures by to pick the root
    cause (`ProcessFailure._get_error_data`, errors/__init__.py:152-158; the first failure the
    agent saw wins a tie)."""
    path = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if not path:
        return
    text = "\n".join(lines)
    data = {
        "message": {
            "message": lines[0] if lines else "",
            "extraInfo": {"py_callstack": text, "timestamp": str(int(time.time()))},
        }
    }
    try:
        with open(path, "w") as f:
            json.dump(data, f)
    except OSError:  # the summary then lacks the line; rank 0 has still said it on stderr
        pass


def stop(lines: Sequence[str], rank: int | None = None, speak: bool | None = None) -> int:
    """Stop this rank on bad input; returns EXIT_CODE for main to exit with.

    `speak` (default: this is rank 0) prints `lines` on stderr in one write; pass False where
    rank 0 already said them, True for one speaker per host. Every rank records them for
    torchrun, a silent one other than rank 0 after lingering (LINGER_S), so that a speaker is
    the rank torchrun sees end first."""
    rank = this_rank() if rank is None else rank
    speak = rank == 0 if speak is None else speak
    if speak:
        tell("\n".join(lines))
    elif rank != 0:  # SIGTERMed meanwhile, it leaves no file: torchrun names the speaker's line
        time.sleep(LINGER_S)
    record_for_torchrun(lines)
    return EXIT_CODE


class ConfigError(ValueError):
    """A bad configuration value; the message names the field (dotted path) and the value."""


_deferred = contextvars.ContextVar("pivot_config_deferred", default=False)


@contextlib.contextmanager
def deferred_checks() -> Iterator[None]:
    """Skip `__post_init__` checks while tyro builds the tree (it would wrap our one-line
    errors in a box); `PivotConfig.validate` runs them all afterwards."""
    token = _deferred.set(True)
    try:
        yield
    finally:
        _deferred.reset(token)


def check(ok: bool, name: str, value: object, why: str) -> None:
    """Raise ConfigError "name=value: why" unless `ok` (or while checks are deferred)."""
    if not ok and not _deferred.get():
        raise ConfigError(f"{name}={value!r}: {why}")
