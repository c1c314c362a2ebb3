"""Finding and killing vLLM engine-core processes below a running job: the recovery tests and the
dress rehearsal SIGKILL one, as the kernel's OOM killer would (docs/reliability.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie has ended: this container's init may never reap it)."""
    try:
        os.kill(pid, 0)
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (ProcessLookupError, OSError):
        return False
    return state != "Z"


def engine_cores(root: int) -> list[int]:
    """The vLLM engine-core processes below process `root` (vLLM titles them VLLM::EngineCore,
    v1/engine/core.py:1406-1411)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    below, todo = [], [root]
    while todo:
        pid = todo.pop()
        below.append(pid)
        todo += children.get(pid, [])
    cores = []
    for pid in below:
        try:
            if b"EngineCore" in Path(f"/proc/{pid}/cmdline").read_bytes():
                cores.append(pid)
        except OSError:
            continue
    return cores


def rank_of(pid: int) -> int | None:
    """The torchrun rank of the process that started process `pid` (its RANK), if any."""
    try:
        ppid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        env = Path(f"/proc/{ppid}/environ").read_bytes().split(b"\0")
    except (OSError, ValueError, IndexError):
        return None
    rank = next((v[5:] for v in env if v.startswith(b"RANK=")), None)
    return int(rank) if rank is not None else None


def serving_ranks(run: Path, role: str) -> set[int]:
    """The ranks of `role`'s replicas up now (their engines serving), from the timeline."""
    timeline = run / "timeline.jsonl"
    up: dict[int, list[int]] = {}
    if not timeline.is_file():
        return set()
    for line in timeline.read_text().splitlines():
        try:  # read while written: the last line may be half there
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("role") == role and e.get("event") in ("shift_up", "shift_down"):
            up[e["slot"]] = e["devices"] if e["event"] == "shift_up" else []
    return {rank for devices in up.values() for rank in devices}


def kill_an_engine_core(job: subprocess.Popen, run: Path, role: str) -> int:
    """As soon as a replica of `role` serves, SIGKILL one vLLM engine core of its ranks (not one
    still starting, whose failure is a shift up's). Not later: on tiny models a run's steps come
    in a burst once its batches are judged, and its engines stop a second after (CI: three
    steps trained within 0.1 s, the job ended before a core could be killed). Again if its
    replica happened to be shifting down (its core stopping anyway) and no failure was seen.
    The pid killed."""
    timeline = run / "timeline.jsonl"
    while job.poll() is None and not serving_ranks(run, role):
        time.sleep(0.2)
    for _ in range(5):
        ranks = serving_ranks(run, role)
        cores = [pid for pid in engine_cores(job.pid) if rank_of(pid) in ranks]
        assert cores and job.poll() is None, "the job ended before a core could be killed"
        os.kill(cores[0], signal.SIGKILL)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and job.poll() is None:
            if '"engine_failed"' in timeline.read_text():
                return cores[0]
            time.sleep(0.2)
    raise AssertionError("no engine failure seen after killing five engine cores")
