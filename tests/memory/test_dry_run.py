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
            "--cluster.nnodes",
            "8",
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


# The fewest 8-device nodes each paper preset fits on, from the memory plan (no model folders:
# sizes from --model.*-params-b). 32B's training device needs 108.7 GB at any size: its
# activations at one longest sample (17408 tokens) do not shrink with more devices.
# since the trainer's logits are one 1,024-token chunk's (issue 70), not 8 bytes of vocabulary per
# micro-batch token, the 7B fits 2 nodes of 80 GB where it needed 4, the 72B 8 where it needed 14
FEWEST = {
    ("qwen2.5-1.5b+glm-z1-9b", 80): 1,
    ("qwen2.5-1.5b+glm-z1-9b", 96): 1,
    ("qwen2.5-7b+qwen3-30b-a3b", 80): 2,
    ("qwen2.5-7b+qwen3-30b-a3b", 96): 2,
    ("qwen2.5-32b+qwen3-30b-a3b", 80): None,
    ("qwen2.5-32b+qwen3-30b-a3b", 96): 2,
    ("qwen2.5-72b+qwen3.5-122b-a10b", 80): 8,
    ("qwen2.5-72b+qwen3.5-122b-a10b", 96): 6,
}


@pytest.mark.parametrize(("preset", "memory"), list(FEWEST))
def test_paper_preset_names_the_fewest_nodes(
    preset: str, memory: int, capsys: pytest.CaptureFixture[str]
) -> None:
    fewest = FEWEST[preset, memory]
    rc = main(["--preset", preset, "--dry-run", "--cluster.gpu-memory-gb", str(memory)])
    out, err = capsys.readouterr()
    assert "devices per node: 8, assumed" in out
    if fewest is None:
        assert rc == 2 and "fits on no count of nodes of 8 devices of 80 GB" in out
        return
    assert rc == 0, err
    assert f"{fewest} hosts x 8 devices" in out
    assert f"fewest nodes it fits on: {fewest} of 8 devices of {memory} GB" in out
    for nnodes in (2, 4, 8):  # what sbatch --nodes N gives the preflight
        rc = main(
            ["--preset", preset, "--dry-run", "--cluster.gpu-memory-gb", str(memory)]
            + ["--cluster.nnodes", str(nnodes), "--cluster.devices-per-node", "8"]
        )
        out, err = capsys.readouterr()
        assert f"{nnodes} hosts x 8 devices" in out and "assumed" not in out
        if nnodes >= fewest:
            assert rc == 0, err
        else:
            assert rc == 2 and f"pivot: fits on {fewest} nodes of 8 devices of {memory} GB" in err


def test_device_memory_is_read_from_the_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    from pivot.cli import parse
    from pivot.memory.report import dry_run

    cfg = parse(["--preset", "qwen2.5-7b+qwen3-30b-a3b", "--dry-run"])
    assert dry_run(cfg, read_memory=lambda: 85.52) == 0  # an H100 80GB: 79.6 GiB
    out = capsys.readouterr().out
    assert "device memory: 85.52 GB, read from cuda:0" in out
    assert "fewest nodes it fits on: 2 of 8 devices of 85.52 GB" in out
    assert dry_run(cfg, read_memory=lambda: None) == 0  # no GPU here: the paper's H20
    assert "device memory: 96 GB, assumed" in capsys.readouterr().out
