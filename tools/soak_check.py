"""tools/soak.py's verdict: the finished run's records audited over every attempt
(pivot/runtime/records/audit.py), the last replayable training steps replayed bit for bit
(pivot/runtime/records/replay.py), and the report, with every violation found."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from pivot.config import TrainConfig
from pivot.runtime.records import audit
from pivot.runtime.records.replay import replay_step, replayable

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
    if figures.restarts != len(kills):
        problems.append(
            f"{len(kills)} kills but {figures.restarts} restarts resumed from a checkpoint"
        )
    torch.set_num_threads(1)  # as the job's ranks (OMP_NUM_THREADS=1): the same reduction order
    steps = [
        k
        for k in range(args.steps - 1, -1, -1)
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
                f"replaying step {k} from its checkpoint differs from checkpoint {k + 1} by {r.max_abs_diff:g}"
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
    print(f"  restarts            {figures.restarts} (each from the newest complete checkpoint)")
    print(f"  sequences aborted   {figures.aborted}, migrated with their tokens {figures.migrated}")
    print(
        f"  samples             lost {acc.lost}, duplicated {acc.duplicated}, judged other than once {acc.misjudged}"
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
