"""A multi-node job (two torchrun agents on this host, one per "node") without PIVOT_JOB_SECRET
stops before loading anything, with one line per node naming the variable."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def test_multi_node_without_a_secret_is_one_line_per_node() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if k != "PIVOT_JOB_SECRET"}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        "2",
        "--nproc-per-node",
        "1",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
        "--rdzv-id",
        "sec-test",
        "--max-restarts",
        "0",
        str(ROOT / "pivot" / "main.py"),
        "--train.steps",
        "1",
    ]
    nodes = [
        subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=240)[0] for p in nodes]
    for proc, out in zip(nodes, outs):
        assert proc.returncode != 0, out[-2000:]
        ours = [line for line in out.splitlines() if line.startswith("pivot: cannot start:")]
        assert ours == [
            "pivot: cannot start: PIVOT_JOB_SECRET is not set: a multi-node run needs a per-job secret on "
            "every rank to authenticate its control plane (launch/slurm/pivot.sbatch sets one; see "
            "docs/security.md)"
        ], out[-2000:]
        assert "building the embedded tiny" not in out  # stopped before any model work
