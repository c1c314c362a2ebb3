"""The main job on 8 emulated devices (torchrun, CPU ranks): 2 steps, exactly-once accounting as
in the runtime tests, response lengths drawn from the simulator's workload, and every rank's
device time in the run summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pivot.sim.workload import Workload, step_samples
from tests.conftest import ROOT
from tests.runtime.models import random_models
from tests.runtime.test_runtime import B, G, check_exactly_once, rows

pytestmark = pytest.mark.slow

L = 400  # paper tokens per real token: responses of a few real tokens keep the run cheap


def test_emulated_run_exactly_once_with_drawn_lengths(tmp_path: Path) -> None:
    policy, genrm = random_models(tmp_path / "models")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "8",
        str(ROOT / "pivot" / "main.py"),
        "--model.policy",
        str(policy),
        "--model.genrm",
        str(genrm),
        "--cluster.device",
        "emulated",
        "--emulate.time-scale",
        "0.001",
        "--emulate.length-scale",
        str(L),
        "--train.devices",
        "2",
        "--train.steps",
        "2",
        "--train.batch-prompts",
        str(B),
        "--train.group-size",
        str(G),
        "--data.max-digits",
        "2",
        "--eval.every",
        "0",
        "--train.filter-groups",
        "0",
        "--checkpoint.every",
        "0",
        "--log.no-progress",
        "--log.no-tensorboard",
        "--log.dir",
        str(tmp_path / "run"),
    ]
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "OMP_WAIT_POLICY": "PASSIVE",
        "PYTHONUNBUFFERED": "1",
    }
    out = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
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
