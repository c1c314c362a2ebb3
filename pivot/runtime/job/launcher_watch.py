"""Ranks end with their launcher.

torchrun's agent watches its ranks, but nothing watches the agent: SIGKILL it (the OOM killer's
usual pick, or `kill -9`) and its ranks, each in a session of their own, would go on training
and writing into the run folder with no one left to stop or restart them. On several hosts the
heartbeat (pivot/runtime/job/liveness.py) ends a job whose rank stops answering, but ranks whose
agent died still answer.

So every rank torchrun starts watches the process that started it: when its parent changes (the
agent died and the rank was re-parented), the rank SIGTERMs itself, which runs its last act
(local rank 0 frees the host's GPS files and rank 0 says why: pivot/runtime/job/resources.py,
sigterm.py), and if it is still alive `GRACE_S` later (blocked in a
collective whose peers are gone), it ends itself. Rank 0 acts at once and the others
`FOLLOW_S` later, so rank 0 says why before it sees its peers go (it would take that for a
failure of theirs); a rank whose peers' errors reach it meanwhile ends quietly (pivot/main.py
asks `launcher_gone`). A rank not started by torchrun (`python pivot/main.py`) has no launcher
to outlive and is not watched.
"""

from __future__ import annotations

import os
import signal
import threading
import time

POLL_S = 1.0
"""How often a rank looks at its parent."""
GRACE_S = 5.0
"""How long its SIGTERM has to end it before it ends itself."""
FOLLOW_S = 2.0
"""How much later than rank 0 the other ranks act."""
EXIT_CODE = 128 + signal.SIGTERM

_gone = threading.Event()
_parent: list[int] = []  # the launcher's pid, once watched


def under_torchrun() -> bool:
    """Whether torchrun's agent started this process (it sets TORCHELASTIC_RUN_ID for its workers)."""
    return "TORCHELASTIC_RUN_ID" in os.environ


def launcher_gone() -> bool:
    """Whether this rank's launcher died (what its last words should say; an error its peers'
    ends cause is no news then)."""
    return _gone.is_set() or bool(_parent and os.getppid() != _parent[0])


def watch_launcher(poll_s: float = POLL_S, grace_s: float = GRACE_S) -> threading.Thread | None:
    """Start watching the parent process under torchrun; None (nothing watched) otherwise."""
    if not under_torchrun():
        return None
    parent = os.getppid()
    _parent[:] = [parent]
    follow = 0.0 if os.environ.get("RANK", "0") == "0" else FOLLOW_S

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        _gone.set()
        time.sleep(follow)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace_s)
        os._exit(EXIT_CODE)

    thread = threading.Thread(target=watch, name="pivot-launcher-watch", daemon=True)
    thread.start()
    return thread
