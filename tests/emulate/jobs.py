"""The main job on emulated devices, as the emulated-run tests launch it: torchrun on CPU ranks,
random tiny models, the runtime tests' batch (B prompts x G), a few paper tokens per real one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT
from tests.runtime.test_runtime import B, G

L = 400
"""Paper tokens per real token: responses of a few real tokens keep the run cheap."""


def job_args(policy: Path, genrm: Path, run: Path, *extra: str) -> list[str]:
    """pivot/main.py's arguments: the two models, emulated devices, no evaluation, dynamic
    sampling or progress bar, records in `run`; `extra` after them (the later flag wins)."""
    return [
        "--model.policy",
        str(policy),
        "--model.genrm",
        str(genrm),
        "--cluster.device",
        "emulated",
        "--emulate.length-scale",
        str(L),
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
        "--log.no-progress",
        "--log.no-tensorboard",
        "--log.dir",
        str(run),
        *extra,
    ]


def torchrun(nproc: int, args: list[str]) -> subprocess.CompletedProcess:
    """Run the job on `nproc` CPU ranks (one thread each); it must succeed."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    cmd += ["--nproc-per-node", str(nproc), str(ROOT / "pivot" / "main.py"), *args]
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "OMP_WAIT_POLICY": "PASSIVE",
        "PYTHONUNBUFFERED": "1",
    }
    out = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=400, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out
