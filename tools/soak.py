"""Soak: the main job on the embedded tiny models under the chaos planner (a random valid shift
plan every planner tick), with ranks SIGKILLed at random times; torchrun restarts the job and it
continues from the newest complete checkpoint (`--checkpoint.resume auto`).

    python tools/soak.py [--steps 60] [--kills 2] [--gap-s 10 40] [--seed 0] [--run-dir runs/soak] [-- extra flags]

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
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from soak_check import check  # noqa: E402
from soak_drive import Timeline, drive  # noqa: E402
from torchrun_job import torchrun_main  # noqa: E402

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
        *args.extra,
        launcher=("--max-restarts", str(args.kills + 2)),
    )
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "OMP_WAIT_POLICY": "PASSIVE",
        "PYTHONUNBUFFERED": "1",
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
