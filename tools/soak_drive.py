"""tools/soak.py's driver: the running job's timeline read as it grows, torchrun's workers found
in /proc, and the kills: a random worker SIGKILLed a random gap after each attempt's first
checkpoint of its own, with a progress line every PROGRESS_EVERY_S."""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import time
from pathlib import Path

from pivot.runtime.records import audit

PROGRESS_EVERY_S = 15.0


class Timeline:
    """timeline.jsonl read incrementally (it only grows while the job runs)."""

    def __init__(self, path: Path) -> None:
        self.path, self.rows, self._offset = path, [], 0

    def poll(self) -> None:
        if not self.path.is_file():
            return
        with self.path.open() as f:
            f.seek(self._offset)
            chunk = f.read()
        complete = chunk[: chunk.rfind("\n") + 1]
        self._offset += len(complete.encode())
        self.rows += [json.loads(line) for line in complete.splitlines() if line.strip()]

    def attempt(self) -> tuple[int, int, int]:
        """(attempts so far, step the current one started at, newest step it committed)."""
        parts = audit.attempts(self.rows)
        rows = parts[-1]
        start = rows[0]["step"] if rows and rows[0].get("event") == "resume" else 0
        committed = [r["step"] for r in rows if r.get("event") == "checkpoint"]
        return len(parts), start, max(committed, default=start)


def workers(agent: int) -> list[int]:
    """The worker processes torchrun's agent started: the children of any of its threads (the
    agent may start them from a thread other than its main one)."""
    pids: list[int] = []
    for task in Path(f"/proc/{agent}/task").glob("*"):
        try:
            pids += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            continue
    return sorted(set(pids))


def environ(pid: int) -> dict[str, str]:
    try:
        return dict(
            kv.split("=", 1)
            for kv in Path(f"/proc/{pid}/environ").read_text().split("\0")
            if "=" in kv
        )
    except OSError:
        return {}


def drive(
    args: argparse.Namespace, proc: subprocess.Popen, timeline: Timeline
) -> tuple[list[dict], str]:
    """Kills ranks while the job runs; returns the kills (time, rank, step) and torchrun's run id."""
    rng = random.Random(args.seed)
    kills: list[dict] = []
    t0 = last_progress = time.monotonic()
    gap = rng.uniform(*args.gap_s)
    armed_at: float | None = None  # when the current attempt first had a checkpoint of its own
    run_id = ""
    while proc.poll() is None:
        time.sleep(0.5)
        now = time.monotonic()
        if now - t0 > args.timeout_s:
            os.killpg(proc.pid, signal.SIGKILL)
            raise TimeoutError(f"the job ran past --timeout-s {args.timeout_s}")
        timeline.poll()
        run_id = run_id or next(
            (environ(p).get("TORCHELASTIC_RUN_ID", "") for p in workers(proc.pid)), ""
        )
        n_attempts, start, newest = timeline.attempt()
        if n_attempts != len(kills) + 1:  # the killed attempt is not back yet
            armed_at = None
        elif armed_at is None and newest > start:
            armed_at = now
        if (
            len(kills) < args.kills
            and armed_at is not None
            and now - armed_at >= gap
            and newest < args.steps - 1
        ):
            pids = workers(proc.pid)
            if pids:
                victim = rng.choice(pids)
                rank = int(environ(victim).get("RANK", -1))
                os.kill(victim, signal.SIGKILL)
                kills.append(
                    {
                        "time": round(now - t0, 1),
                        "rank": rank,
                        "pid": victim,
                        "after_checkpoint": newest,
                    }
                )
                print(
                    f"soak: [{now - t0:7.1f}s] SIGKILL rank {rank} (pid {victim}) after checkpoint {newest}",
                    flush=True,
                )
                armed_at, gap = None, rng.uniform(*args.gap_s)
        if now - last_progress >= PROGRESS_EVERY_S:
            last_progress = now
            f = audit.figures(timeline.rows)
            print(
                f"soak: [{now - t0:7.1f}s] attempt {n_attempts}, checkpoint {newest}/{args.steps}, plans {f.plans}, "
                f"shifts {f.shifts} (up {f.shifts_up}, down {f.shifts_down}), kills {len(kills)}/{args.kills}, "
                f"aborted {f.aborted}, migrated {f.migrated}",
                flush=True,
            )
    return kills, run_id
