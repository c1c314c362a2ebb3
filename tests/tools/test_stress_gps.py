"""GPS torn-read stress: its content oracle catches a torn read, and a short run finds none."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
import torch

from tests.conftest import ROOT
from tools.stress_gps import Content, stress_specs


def test_oracle_accepts_one_version_and_rejects_a_mix() -> None:
    specs = stress_specs(0.5, "bfloat16")
    content = Content(specs)
    name = specs[1].name
    v5, v7 = content.tensor(name, 5), content.tensor(name, 7)
    whole = tuple((0, d) for d in v5.shape)
    assert not torch.isnan(v5.float()).any() and not torch.isinf(v5.float()).any()
    assert content.matches({name: v5}, 5, {name: whole})
    assert not content.matches({name: v5}, 7, {name: whole})  # right bytes, wrong version reported
    torn = v5.clone()
    torn[v5.shape[0] // 2 :] = v7[v5.shape[0] // 2 :]  # the writer of version 7 overtook the copy
    assert not content.matches({name: torn}, 5, {name: whole}) and not content.matches(
        {name: torn}, 7, {name: whole}
    )
    rows = ((2, 6),) + whole[1:]  # a TP slice is checked against the same slice of the version
    assert content.matches({name: v5[2:6]}, 5, {name: rows})


@pytest.mark.slow
def test_short_stress_finds_no_torn_read() -> None:
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "stress_gps.py"),
            "--seconds",
            "2",
            "--readers",
            "2",
            "--mb",
            "2",
        ],
        capture_output=True,
        text=True,
        timeout=180,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    figures = {
        k: int(v)
        for k, v in re.findall(
            r"^(versions published|reads|torn reads|version went backwards): (\d+)",
            out.stdout,
            re.M,
        )
    }
    assert figures["torn reads"] == 0 and figures["version went backwards"] == 0
    assert figures["versions published"] >= 2 and figures["reads"] >= 2, out.stdout
    assert re.search(r"-> ratios \d+\.\d+ and \d+\.\d+", out.stdout)
