"""A paper preset takes its world from the launcher: its training pool is a share of it."""

from __future__ import annotations

import pytest

from configs.presets import PAPER_WORLD, get_preset, paper_preset
from pivot.cli import parse


@pytest.mark.parametrize(
    ("preset", "world", "train"),
    [
        ("qwen2.5-7b+qwen3-30b-a3b", 16, 4),  # a quarter, in whole TP-4 judge replicas
        ("qwen2.5-7b+qwen3-30b-a3b", 24, 4),
        ("qwen2.5-7b+qwen3-30b-a3b", 64, 16),
        ("qwen2.5-1.5b+glm-z1-9b", 8, 4),
        ("qwen2.5-72b+qwen3.5-122b-a10b", 24, 8),
        ("qwen2.5-72b+qwen3.5-122b-a10b", 256, 128),
    ],
)
def test_the_training_pool_scales_with_the_world(preset: str, world: int, train: int) -> None:
    cfg = parse(["--preset", preset], world_size=world, local_world_size=8)
    assert cfg.train.devices == train and cfg.cluster.nnodes == 0
    assert cfg.train.resize_every == 5  # auto: the run sizes it from there


def test_a_given_training_pool_wins_over_the_share() -> None:
    cfg = parse(
        ["--preset", "qwen2.5-7b+qwen3-30b-a3b", "--train.devices", "12"],
        world_size=32,
        local_world_size=8,
    )
    assert cfg.train.devices == 12 and cfg.train.resize_every == 0  # fixed


def test_auto_without_a_share_starts_on_a_quarter() -> None:
    cfg = parse(["--train.devices", "auto"], world_size=8, local_world_size=8)
    assert cfg.train.devices == 2 and cfg.train.resize_every == 5
    cfg = parse(["--train.devices", "auto", "--train.resize-every", "3"], world_size=8)
    assert cfg.train.resize_every == 3


@pytest.mark.parametrize("preset", list(PAPER_WORLD))
def test_paper_preset_is_the_papers_cluster(preset: str) -> None:
    paper, shipped = paper_preset(preset), get_preset(preset)
    assert paper.cluster.nnodes * paper.cluster.devices_per_node == PAPER_WORLD[preset]
    assert shipped.cluster.nnodes == shipped.cluster.devices_per_node == 0
    assert shipped.cluster.gpu_memory_gb == 0 and shipped.train.devices == "auto"


def test_tiny_preset_keeps_its_pool() -> None:
    assert parse([], world_size=4, local_world_size=4).train.devices == 1
    assert paper_preset("tiny-cpu") == get_preset("tiny-cpu")


def test_a_judge_template_typed_on_the_command_line_replaces_the_presets_file() -> None:
    argv = [
        "--preset",
        "qwen2.5-7b+qwen3-30b-a3b",
        "--reward.judge-template",
        "{question}{response}",
    ]
    cfg = parse(argv, world_size=16, local_world_size=8)
    assert cfg.reward.judge_template_file == "" and cfg.reward.judge_template.startswith("{q")
    shipped = parse(argv[:2], world_size=16, local_world_size=8).reward.judge_template_file
    assert shipped.endswith("configs/judges/qwen3.txt")
