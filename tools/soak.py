"""Soak: the main job on the embedded tiny models under the chaos planner (a random valid shift
plan every planner tick), with ranks SIGKILLed at random times; torchrun restarts the job and it
continues from the newest complete checkpoint (`--checkpoint.resume auto`). `--faults` also makes
engine steps fail (PIVOT_FAULTS, pivot/faults.py): each is recovered in place, without a restart
(docs/reliability.md); `--min-faults N` fails the soak if fewer than N happened.

    python tools/soak.py [--steps 60] [--kills 2] [--gap-s 10 40] [--seed 0] [--run-dir runs/soak]
        [--faults engine_step:*:0.02 --min-faults 200] [-- extra flags]

A kill waits until the running attempt has committed a checkpoint of its own (so every attempt
makes progress) and then a random gap; the victim is a random worker among the torchrun agent's
children. Once the job ends, the run's own records are checked over every attempt
(pivot/runtime/records/audit.py): every prompt of every step has exactly G responses, each judged once
and trained once; steps and checkpoints contiguous, each attempt resumed from the newest
complete checkpoint; every shift up's weights equal the GPS version it reports; and the last
replayable training steps, replayed from their checkpoint in this process, give the next
checkpoint's policy bit for bit (pivot/runtime/records/replay.py). Prints shifts, kills, restarts,
sequences aborted and migrated, lost and duplicated samples; exit code 1 on any violation.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from torchrun_job import torchrun_main

from pivot.config import TrainConfig
from pivot.runtime.records import audit
from pivot.runtime.records.replay import replay_step, replayable

# The verdict: the finished run's records audited over every attempt
# (pivot/runtime/records/audit.py), the last replayable training steps replayed bit for bit
# (pivot/runtime/records/replay.py), and the report, with every violation found.
REPLAYS = 3
"""Training steps replayed at the end (the last ones whose batch their checkpoint holds)."""


def check(
    args: argparse.Namespace,
    policy: Path,
    genrm: Path,
    kills: list[dict],
    rc: int,
    leaked: list[str],
) -> int:
    run = args.run_dir
    timeline = audit.read_rows(run / "timeline.jsonl")
    cfg = json.loads((run / "config.json").read_text())
    train = TrainConfig(**cfg["train"])
    checkpoints = run / "checkpoints"
    problems = [] if rc == 0 else [f"the job exited with code {rc} (see {run / 'soak.log'})"]
    acc = audit.exactly_once(run, args.steps, args.batch_prompts, args.group_size)
    problems += acc.violations + audit.resumes(timeline)
    weights = audit.shift_up_weights(timeline, checkpoints, policy, genrm)
    problems += weights.mismatched
    if leaked:
        problems.append(
            f"{len(leaked)} GPS shared-memory files of this run left in /dev/shm: {leaked[:4]}"
        )
    figures = audit.figures(timeline)
    events = [r.get("event") for r in timeline if r.get("kind") == "shift"]
    failures, rebuilt = events.count("engine_failed"), events.count("engine_rebuilt")
    if failures < args.min_faults:
        problems.append(
            f"{failures} engine failures recovered, fewer than --min-faults {args.min_faults}"
        )
    if figures.restarts != len(kills):
        problems.append(
            f"{len(kills)} kills but {figures.restarts} restarts resumed from a checkpoint"
        )
    torch.set_num_threads(1)  # as the job's ranks (OMP_NUM_THREADS=1): the same reduction order
    steps = [
        k
        for k in range(args.steps, 0, -1)
        if replayable(checkpoints, k, train.group_size, train.staleness)
    ]
    replays = []
    for k in steps[:REPLAYS]:
        r = replay_step(
            checkpoints,
            k,
            train,
            cfg["rollout"]["temperature"],
            audit.read_rows(run / "samples.jsonl"),
        )
        replays.append(r)
        if r.max_abs_diff != 0.0:
            problems.append(
                f"replaying step {k} from checkpoint {k - 1} differs from checkpoint {k} by {r.max_abs_diff:g}"
            )
    if not replays:
        problems.append("no checkpoint held its step's whole batch: nothing could be replayed")
    print(f"\nsoak: {args.steps} steps, {len(timeline)} timeline rows, exit code {rc}")
    print(
        f"  shifts executed     {figures.shifts} (up {figures.shifts_up}, down {figures.shifts_down}) "
        f"in {figures.plans} plans, "
        f"{figures.plans_mid_step} of them while a training step ran"
    )
    print(
        f"  kills survived      {len(kills) if rc == 0 else 0} of {len(kills)} (requested {args.kills}); ranks "
        f"{sorted(k['rank'] for k in kills)}"
    )
    back = [k["back_s"] for k in kills if "back_s" in k]
    up = [k["up_s"] for k in kills if "back_s" in k]
    restart_s = (
        f"; {min(back):.1f}-{max(back):.1f} s from a kill to the next trained step, of which "
        f"{min(up):.1f}-{max(up):.1f} s until the new attempt's controller is up"
        if back
        else ""
    )
    print(
        f"  restarts            {figures.restarts} (each from the newest complete checkpoint{restart_s})"
    )
    if args.faults:
        recover_s = [r["recover_s"] for r in timeline if r.get("event") == "engine_rebuilt"]
        print(
            f"  engine failures     {failures} recovered in place ({rebuilt} rebuilt, "
            f"{events.count('replica_retired')} kept down; longest {max(recover_s, default=0):.2f} s "
            f"to serving again), no restart for any"
        )
    print(f"  sequences aborted   {figures.aborted}, migrated with their tokens {figures.migrated}")
    print(
        f"  samples             lost {acc.lost}, duplicated {acc.duplicated}, judged other than once {acc.misjudged}"
    )
    if acc.episodes:
        print(
            f"  episodes            {acc.episodes} trained once each, {acc.turns} turns, "
            f"{acc.tool_calls} tool calls"
        )
    print(
        f"  shift-up weights    {weights.verified} equal to their GPS version, {len(weights.mismatched)} differ, "
        f"{weights.unverifiable} unverifiable (a version that died with a killed attempt)"
    )
    worst = max((r.max_abs_diff for r in replays), default=0.0)
    print(
        f"  replayed steps      {[r.step for r in replays]}: max |diff| {worst:g} "
        f"(over {replays[0].tensors if replays else 0} tensors each)"
    )
    for p in problems:
        print(f"  VIOLATION: {p}")
    print("soak: " + ("FAILED" if problems else "passed"), flush=True)
    return 1 if problems else 0


# The driver: the running job's timeline read as it grows, torchrun's workers found in /proc, and
# the kills: a random worker SIGKILLed a random gap after each attempt's first checkpoint of its
# own, with a progress line every PROGRESS_EVERY_S.
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


def rows_in(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.is_file() else 0


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
    metrics = args.run_dir / "metrics.jsonl"
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
        for k in kills:  # from the kill to the restarted attempt's first trained step
            if "back_s" in k or n_attempts <= k["attempt"]:
                continue
            rows = rows_in(metrics)
            if "rows" not in k:  # the new attempt's controller is up (its resume row is there)
                k["rows"], k["up_s"] = rows, round(now - k["at"], 1)
            if rows > k["rows"]:
                k["back_s"] = round(now - k["at"], 1)
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
                        "at": now,
                        "attempt": n_attempts,
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


SMALL = [
    "--rollout.max-new-tokens",
    "12",
    "--reward.max-new-tokens",
    "8",
    "--data.max-digits",
    "2",
    "--eval.prompts",
    "6",
    "--train.filter-groups",
    "0",
]  # random models: every group is uniform


# multi-turn episodes (--tools): the tiny tools models' calculator task, turns long enough for a
# call (about 70 tokens) and the answer after it
TOOLS = [
    "--tools.config",
    str(ROOT / "configs" / "tools" / "calculator.yaml"),
    "--rollout.max-new-tokens",
    "96",
    "--tools.max-episode-tokens",
    "192",
    "--tools.max-turns",
    "3",
]


def launch(args: argparse.Namespace, policy: Path, genrm: Path, log: Path) -> subprocess.Popen:
    cmd = torchrun_main(
        args.nproc,
        "--preset",
        "tiny-cpu",
        "--model.policy",
        str(policy),
        "--model.genrm",
        str(genrm),
        "--planner.strategy",
        "chaos",
        "--planner.chaos-seed",
        str(args.seed),
        "--planner.interval-s",
        str(args.interval_s),
        "--checkpoint.resume",
        "auto",
        "--checkpoint.every",
        "1",
        "--log.verify-weights",
        "--log.dir",
        str(args.run_dir),
        "--log.no-progress",
        "--log.no-tensorboard",
        "--seed",
        str(args.seed),
        "--train.steps",
        str(args.steps),
        "--train.batch-prompts",
        str(args.batch_prompts),
        "--train.group-size",
        str(args.group_size),
        *SMALL,
        *(TOOLS if args.tools else []),
        # faults at random recur on every replica: keep each one coming back (a replica kept
        # down is tests/runtime/test_recovery.py's)
        *(["--recovery.max-engine-failures", "1000000"] if args.faults else []),
        *args.extra,
        launcher=("--max-restarts", str(args.kills + 2)),
    )
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "OMP_WAIT_POLICY": "PASSIVE",
        "PYTHONUNBUFFERED": "1",
        "PIVOT_FAULTS": args.faults,
    }
    print("soak: " + " ".join(cmd[2:]), flush=True)
    return subprocess.Popen(
        cmd, stdout=log.open("w"), stderr=subprocess.STDOUT, env=env, start_new_session=True
    )


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--steps", type=int, default=60, help="RL steps of the job")
    ap.add_argument("--kills", type=int, default=2, help="ranks to SIGKILL during the run")
    ap.add_argument(
        "--gap-s",
        type=float,
        nargs=2,
        default=(10.0, 40.0),
        metavar=("MIN", "MAX"),
        help="seconds between an attempt's first checkpoint and its kill, drawn uniformly",
    )
    ap.add_argument(
        "--seed", type=int, default=0, help="seed of the chaos planner, the kills and the job"
    )
    ap.add_argument(
        "--interval-s", type=float, default=0.05, help="planner interval (one chaos plan per tick)"
    )
    ap.add_argument("--batch-prompts", type=int, default=4, help="prompts per step (B)")
    ap.add_argument("--group-size", type=int, default=2, help="responses per prompt (G)")
    ap.add_argument("--nproc", type=int, default=4, help="ranks")
    ap.add_argument(
        "--run-dir",
        type=Path,
        default=ROOT / "runs" / "soak",
        help="run folder (must not hold another run)",
    )
    ap.add_argument(
        "--timeout-s", type=float, default=7200.0, help="give up (and fail) after this long"
    )
    ap.add_argument(
        "--faults",
        default="",
        help="engine faults to inject (PIVOT_FAULTS: where:role:when, e.g. engine_step:*:0.02)",
    )
    ap.add_argument(
        "--min-faults", type=int, default=0, help="fail unless this many engine failures happened"
    )
    ap.add_argument(
        "--tools",
        action="store_true",
        help="multi-turn episodes: the tiny tools models (--preset tiny-tools's) call a calculator",
    )
    ap.add_argument("extra", nargs="*", help="more flags for pivot/main.py (after --)")
    args = ap.parse_args()
    if args.kills < 0 or args.steps < 2:
        ap.error(f"--kills must be >= 0 and --steps >= 2, got {args.kills} and {args.steps}")
    if args.run_dir.exists() and any(args.run_dir.iterdir()):
        if not (args.run_dir / "soak.log").is_file():
            ap.error(
                f"--run-dir {args.run_dir} holds something that is not a soak run; choose another"
            )
        shutil.rmtree(args.run_dir)
    args.run_dir.mkdir(parents=True, exist_ok=True)
    from pivot.tiny.shipped import ensure_tiny_models

    tiny = ensure_tiny_models()
    policy, genrm = Path(tiny.policy), Path(tiny.genrm)
    if args.tools:
        from pivot.tiny.tools_build import TOOLS_WEIGHTS

        policy, genrm = TOOLS_WEIGHTS / "policy", TOOLS_WEIGHTS / "genrm"
    proc = launch(args, policy, genrm, args.run_dir / "soak.log")
    timeline = Timeline(args.run_dir / "timeline.jsonl")
    try:
        kills, run_id = drive(args, proc, timeline)
    except TimeoutError as e:
        print(f"soak: FAILED: {e}", flush=True)
        return 1
    leaked = (
        sorted(n for n in os.listdir("/dev/shm") if run_id and n.startswith(f"pivot-{run_id}-"))
        if os.path.isdir("/dev/shm")
        else []
    )
    return check(args, policy, genrm, kills, proc.returncode, leaked)


if __name__ == "__main__":
    raise SystemExit(main())
