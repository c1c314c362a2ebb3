"""tools/soak.py, short: the main job under the chaos planner for a few dozen shifts with one
rank SIGKILLed and engine steps failing at random; torchrun restarts it after the kill, the
engine failures are recovered in place, and the audit over both attempts finds nothing lost,
nothing trained or judged twice, every shift up's weights equal to its GPS version and the last
steps replayed bit for bit."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def test_short_soak_with_one_kill(tmp_path: Path) -> None:
    cmd = [
        sys.executable,
        str(ROOT / "tools" / "soak.py"),
        "--steps",
        "20",
        "--kills",
        "1",
        "--gap-s",
        "0.2",
        "1",
        "--seed",
        "1",
        "--run-dir",
        str(tmp_path / "run"),
        "--faults",
        "engine_step:*:0.01,judge_garbage:reward:0.1",
        "--min-faults",
        "3",
    ]
    out = subprocess.run(
        cmd, capture_output=True, text=True, timeout=480, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    text = out.stdout + out.stderr
    assert out.returncode == 0 and "soak: passed" in text, text[-4000:]
    assert "VIOLATION" not in text
    shifts = int(re.search(r"shifts executed\s+(\d+)", text).group(1))
    assert shifts >= 24, text[-2000:]
    assert "kills survived      1 of 1" in text and re.search(r"restarts\s+1 ", text), text[-2000:]
    assert re.search(r"samples\s+lost 0, duplicated 0, judged other than once 0", text)
    assert re.search(r"max \|diff\| 0 ", text)
    assert re.search(r"engine failures\s+\d+ recovered in place", text), text[-2000:]
