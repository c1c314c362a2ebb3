"""The main job on 8 emulated devices (torchrun, CPU ranks): 2 steps, exactly-once accounting as
in the runtime tests, response lengths drawn from the simulator's workload, and every rank's
device time in the run summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pivot.sim.workload import Workload, step_samples
from tests.emulate.jobs import L, job_args, torchrun
from tests.runtime.models import random_models
from tests.runtime.test_runtime import B, G, check_exactly_once, rows

pytestmark = pytest.mark.slow


def test_emulated_run_exactly_once_with_drawn_lengths(tmp_path: Path) -> None:
    policy, genrm = random_models(tmp_path / "models")
    args = job_args(policy, genrm, tmp_path / "run", "--emulate.time-scale", "0.001")
    args += ["--train.devices", "2", "--train.steps", "2", "--checkpoint.every", "0"]
    out = torchrun(8, args)
    run = tmp_path / "run"
    check_exactly_once(run, 2)
    workload = Workload(prompts_per_step=B, group_size=G)
    for r in rows(run, "samples.jsonl"):  # EOS ignored until the length drawn for that very sample
        drawn = step_samples(workload, 0, r["step"], 8)[r["prompt"] * G + r["sample"]].response_len
        assert r["response_tokens"] == max(1, round(drawn / L)), r
    tallies = sorted(p.name for p in (run / "emulated").iterdir())
    assert tallies == [f"rank_{i}.json" for i in range(8)]
    train = [
        json.loads((run / "emulated" / f"rank_{i}.json").read_text())
        .get("train", {})
        .get("count", 0)
        for i in range(8)
    ]
    assert train == [0] * 6 + [2, 2]  # the training slot is the last two devices
    assert "emulated device time" in out.stdout
