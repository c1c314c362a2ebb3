"""`pivot/main.py --preset NAME --dry-run` for every preset: no torchrun, no GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from configs.presets import PRESETS
from pivot.main import main


@pytest.mark.parametrize("preset", list(PRESETS))
def test_every_preset(preset: str, qwen2_folder: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # tiny-cpu's embedded models may not be built on this machine: point it at a folder
    models = (
        ["--model.policy", str(qwen2_folder), "--model.genrm", str(qwen2_folder)]
        if preset == "tiny-cpu"
        else []
    )
    rc = main(
        ["--preset", preset, "--dry-run", *models]
    )  # as shipped: each preset fits its hardware
    out, err = capsys.readouterr()
    for section in (
        "rollout device",
        "reward device",
        "train device",
        "GPS buffers (replicated",
        "pinned",
    ):
        assert section in out
    assert rc == 0, err


def test_overflow_exits_2_naming_field(capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(
        [
            "--preset",
            "qwen2.5-32b+qwen3-30b-a3b",
            "--dry-run",
            "--rollout.tp",
            "1",
            "--cluster.host-memory-gb",
            "200",
        ]
    )
    out, err = capsys.readouterr()
    assert rc == 2
    assert "GPS buffers (grouped, k=2" in out
    assert (
        "does not fit: rollout device (TP=1, Qwen2.5-32B)" in err
        and "cluster.gpu_memory_gb=96 is short by" in err
    )
    assert (
        "does not fit: host (each of 8)" in err
        and "cluster.host_memory_gb=200 is short by 147.00 GB" in err  # 25 + 2 x 61 GB staged
    )
