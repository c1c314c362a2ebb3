"""`--dry-run` of every paper preset on folders with the real checkpoints' shapes and layouts
(headers only: `tests/model/fixtures/hub_layouts.py`), and the context-limit check."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from configs.presets import PAPER_WORLD, get_preset
from pivot.main import main
from pivot.memory.context_check import check_context
from tests.model.fixtures.hub_layouts import write_header_only, write_tokenizer
from tests.model.fixtures.hub_models import MODELS

PAPER = list(PAPER_WORLD)


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("real_shapes")
    for name in MODELS:
        write_header_only(name, root / name)
    return root


def _flags(preset: str, root: Path) -> list[str]:
    m = get_preset(preset).model
    return [
        "--model.policy",
        str(root / Path(m.policy).name),
        "--model.genrm",
        str(root / Path(m.genrm).name),
    ]


@pytest.mark.parametrize("preset", PAPER)
@pytest.mark.slow
def test_preset_fits_on_real_shapes(
    preset: str, real: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc = main(["--preset", preset, "--dry-run", *_flags(preset, real)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    for role in ("rollout device", "reward device", "train device"):
        assert re.search(rf"{role} .*\n(.*\n)*? +total +[\d.]+ GB of 96.00 GB  fits", out), role
    assert "context (judge template" in out and "DOES NOT FIT" not in out
    print(out)  # the per-device figures, for the record (-s)


def test_fused_experts_charged_per_slice(real: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's trial: TP=8 GenRM devices of Qwen3.5-122B-A10B were charged all ~232 GB of experts."""
    preset = "qwen2.5-72b+qwen3.5-122b-a10b"
    assert main(["--preset", preset, "--dry-run", *_flags(preset, real)]) == 0
    out = capsys.readouterr().out
    assert (
        "Qwen3.5-122B-A10B: 122.11B parameters, 244.22 GB" in out
    )  # vision and MTP are not loaded
    weights = float(re.search(r"reward device \(TP=8.*\n +weights +([\d.]+) GB", out).group(1))
    assert 244.22 / 8 < weights < 35.0


def test_glm_context_overrun_is_refused(real: Path, capsys: pytest.CaptureFixture[str]) -> None:
    preset = "qwen2.5-1.5b+glm-z1-9b"
    rc = main(
        ["--preset", preset, "--dry-run", *_flags(preset, real), "--reward.max-new-tokens", "20480"]
    )
    err = capsys.readouterr().err
    assert rc == 2
    assert (
        "reward: longest prompt 18353 (judge template 945 + question 2048 + response 15360) + "
        "reward.max_new_tokens=20480 = 38833 tokens exceed GLM-Z1-9B-0414's max_position_embeddings=32768"
    ) in err


def test_startup_check_uses_the_genrm_tokenizer(real: Path, tmp_path: Path) -> None:
    cfg = get_preset("qwen2.5-1.5b+glm-z1-9b")
    policy, genrm = real / "Qwen2.5-1.5B", real / "GLM-Z1-9B-0414"
    write_tokenizer(genrm)
    try:
        rollout, reward = check_context(cfg, policy, genrm)  # the preset as shipped fits
        assert reward.limit == 32768 and reward.total <= 32768 and rollout.limit == 131072
        over = dataclasses.replace(
            cfg, reward=dataclasses.replace(cfg.reward, max_new_tokens=20480)
        )
        with pytest.raises(
            ValueError,
            match=r"reward: longest prompt \d+ .* = \d+ tokens exceed GLM-Z1-9B-0414's "
            r"max_position_embeddings=32768",
        ):
            check_context(over, policy, genrm)
    finally:
        (genrm / "tokenizer.json").unlink()


def test_real_qwen35_folder_passes_the_startup_folder_check(real: Path) -> None:
    from pivot.model.hf_folder import check_folder

    check_folder(
        real / "Qwen3.5-122B-A10B"
    )  # fused experts, prefixes, MTP and vision as the hub ships them
