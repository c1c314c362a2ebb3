"""Config tree, presets and validation: bad values fail before any process group, naming the field."""

from __future__ import annotations

import subprocess
import sys

import pytest

from configs.presets import PRESETS, get_preset, paper_preset
from pivot.cli import parse
from pivot.config import ConfigError
from tests.conftest import ROOT


def test_default_is_tiny_cpu() -> None:
    cfg = parse([], 4, 4)
    assert cfg.preset == "tiny-cpu" and cfg.cluster.mode == "pivot"


@pytest.mark.parametrize("name", list(PRESETS))
def test_presets_are_self_consistent(name: str) -> None:
    cfg = paper_preset(name)
    world = cfg.cluster.nnodes * cfg.cluster.devices_per_node or 4
    cfg.validate(world, cfg.cluster.devices_per_node or 4)


def test_paper_groups_match_tables_1_and_4() -> None:
    g = paper_preset("qwen2.5-72b+qwen3.5-122b-a10b")
    assert (g.rollout.tp, g.reward.tp, g.train.devices, g.cluster.nnodes * 8) == (8, 8, 64, 128)
    g = paper_preset("qwen2.5-7b+qwen3-30b-a3b")
    assert (g.rollout.tp, g.reward.tp, g.train.devices, g.cluster.nnodes * 8) == (1, 4, 8, 32)


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["--rollout.tp", "3"], "rollout.tp=3"),
        (["--train.devices", "9"], "train.devices=9"),
        (["--train.staleness", "-1"], "train.staleness=-1"),
        (["--preset", "nope"], "preset='nope'"),
        (["--rollout.top-p", "0"], "rollout.top_p=0.0"),
        (["--planner.rule-low", "0.9"], "planner.rule_low=0.9"),
        (
            [
                "--model.attention",
                "flash",
                "--model.dtype",
                "bfloat16",
                "--reward.engine.block-size",
                "16",
            ],
            "reward.engine.block_size=16",
        ),
        (["--rollout.engine.block-size", "-1"], "engine.block_size=-1"),
        (["--emulate.time-scale", "0"], "emulate.time_scale=0.0"),  # the emulation section
        (["--train.group-size", "1"], "train.group_size=1"),  # GRPO learns nothing from it
        (["--train.rollout-is-threshold", "1"], "train.rollout_is_threshold=1.0"),
        (
            ["--train.rollout-rs-threshold", "3", "--train.rollout-rs-threshold-lower", "3"],
            "train.rollout_rs_threshold_lower=3.0",
        ),
        (["--emulate.length-scale", "0"], "emulate.length_scale=0"),
        (["--planner.reserve-rollout", "4"], "planner.reserve_rollout=4"),  # 3 beside the pool
        (  # the sizing scores a split of every inference device, or none
            ["--train.resize-every", "2", "--planner.reserve-rollout", "1"],
            "planner.reserve_rollout=1",
        ),
        (
            ["--cluster.device", "emulated", "--emulate.preset", "tiny-cpu"],
            "emulate.preset='tiny-cpu'",
        ),
    ],
)
def test_bad_values_name_the_field(argv: list[str], field: str) -> None:
    with pytest.raises(ConfigError, match=field.replace(".", r"\.")):
        parse(argv, 4, 4)


@pytest.mark.parametrize(
    ("argv", "mode"),
    [
        ([], "no"),
        (["--checkpoint.resume"], "yes"),
        (["--checkpoint.resume", "--train.steps", "3"], "yes"),
        (["--checkpoint.resume", "auto"], "auto"),
        (["--checkpoint.resume", "auto", "--checkpoint.resume", "no"], "no"),
    ],
)
def test_resume_modes_and_bare_flag(argv: list[str], mode: str) -> None:
    assert parse(argv, 4, 4).checkpoint.resume == mode


def test_block_size_default_follows_the_attention_kernel() -> None:
    """flash-attn's paged KV takes blocks of a multiple of 256 tokens (its `block_table` contract);
    flex's block is its mask's key block (64 on a GPU); the gather reference keeps 16."""
    cfg = parse(["--model.attention", "flash", "--model.dtype", "bfloat16"], 4, 4)
    engine = cfg.reward.engine
    assert cfg.rollout.engine.kv_block_size("flash") == 256
    assert engine.kv_block_size("sdpa") == 64 and engine.paged_kernel("sdpa") == "flex"
    assert engine.kv_block_size("sdpa", on_gpu=False) == 16
    assert engine.paged_kernel("sdpa", on_gpu=False) == "gather"
    assert (
        parse(
            [
                "--model.attention",
                "flash",
                "--model.dtype",
                "bfloat16",
                "--rollout.engine.block-size",
                "512",
            ],
            4,
            4,
        ).rollout.engine.block_size
        == 512
    )
    for name in PRESETS:  # the paper presets run flash attention with the kernel's default block
        cfg = get_preset(name)
        assert (
            cfg.rollout.engine.kv_block_size(cfg.model.attention) % 256 == 0
            or cfg.model.attention == "sdpa"
        )


def test_overrides_apply_on_top_of_preset() -> None:
    cfg = parse(["--preset", "qwen2.5-1.5b+glm-z1-9b", "--train.lr", "3e-6"], 32, 8)
    assert cfg.train.lr == 3e-6 and cfg.train.devices == 16


def test_main_exits_2_with_one_line_before_process_groups() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "pivot" / "main.py"), "--train.staleness", "-1"],
        capture_output=True,
        text=True,
        env={"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4", "RANK": "0", "PATH": ""},
    )
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "pivot: config error: train.staleness=-1: must be >= 0"
    ]


def test_help_lists_flags_with_docstrings() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "pivot" / "main.py"), "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0
    assert "--train.staleness" in out.stdout and "Largest policy-version lag" in out.stdout
