"""The command line of a one-host torchrun job of pivot/main.py, written once for the tools that
launch the main job (bench_e2e, bench_e2e_emulated, bench_learning, soak) and for the tests
(tests/conftest.py imports it; it imports nothing of tests/, so a tool that runs the job needs
no test tree)."""

from __future__ import annotations

import sys
from pathlib import Path

MAIN = Path(__file__).resolve().parents[1] / "pivot" / "main.py"


def torchrun_main(nproc: int, *flags: str, launcher: tuple[str, ...] = ()) -> list[str]:
    """`nproc` ranks of pivot/main.py with Pivot's `flags`, in this interpreter; `launcher` holds
    torchrun's own options (e.g. `--max-restarts 3`)."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        str(nproc),
        *launcher,
        str(MAIN),
        *flags,
    ]
