"""`--config FILE` (pivot/cli.py): a YAML or JSON file in place of a preset, flags after it
overriding it; `--print-config` writes one; a run folder's `config.json` is one."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest

from configs.presets import PAPER_WORLD, PRESETS
from pivot.cli import config_text, parse
from pivot.config import ConfigError
from tests.conftest import ROOT


@pytest.mark.parametrize("name", list(PRESETS))
def test_every_preset_printed_as_a_file_gives_the_presets_config(tmp_path: Path, name: str) -> None:
    file = tmp_path / f"{name}.yaml"
    file.write_text(config_text(parse(["--preset", name, "--print-config"])))
    world = 32 if name in PAPER_WORLD else 4
    assert parse(["--config", str(file)], world, min(world, 8)) == parse(
        ["--preset", name], world, min(world, 8)
    )


def test_flags_after_the_file_override_it_and_a_partial_file_fills_in_from_its_preset(
    tmp_path: Path,
) -> None:
    file = tmp_path / "exp.yaml"
    file.write_text("preset: tiny-cpu\ntrain:\n  lr: 0.0003\n  steps: 7\nseed: 5\n")
    cfg = parse(["--config", str(file), "--train.steps", "3"], 4, 4)
    base = parse(["--seed", "5", "--train.lr", "0.0003", "--train.steps", "3"], 4, 4)
    assert cfg == base and cfg.train.steps == 3 and cfg.train.lr == 0.0003


def test_a_run_folders_config_json_relaunches_its_config_in_a_new_folder(tmp_path: Path) -> None:
    """config.json is what the job wrote (dataclasses.asdict of the run's config, its log.dir the
    run's folder): as a --config file it gives that config, writing elsewhere."""
    ran = parse(["--train.steps", "9", "--rollout.max-new-tokens", "20"], 4, 4)
    written = dataclasses.asdict(
        dataclasses.replace(ran, log=dataclasses.replace(ran.log, dir="runs/x"))
    )
    (tmp_path / "config.json").write_text(json.dumps(written, indent=1))
    again = parse(["--config", str(tmp_path / "config.json")], 4, 4)
    assert again == ran and again.log.dir == ""


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("train:\n  stpes: 3\n", "'train.stpes' is no config field"),
        ("train:\n  steps: three\n", "Expected `int`, got `str` - at `$.train.steps`"),
        ("preset: nonesuch\n", "preset 'nonesuch' is not one of"),
        ("- a list\n", "holds no mapping"),
        ("train: [\n", "ParserError"),
    ],
)
def test_a_bad_file_is_one_line_naming_the_field(tmp_path: Path, text: str, says: str) -> None:
    file = tmp_path / "bad.yaml"
    file.write_text(text)
    with pytest.raises(ConfigError) as e:
        parse(["--config", str(file)], 4, 4)
    assert says in str(e.value) and str(file) in str(e.value) and "\n" not in str(e.value)


def test_print_config_from_the_command_line(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "pivot/main.py", "--preset", "qwen2.5-7b+qwen3-30b-a3b", "--print-config"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    assert (
        out.stdout.startswith("preset: qwen2.5-7b+qwen3-30b-a3b\n")
        and "print_config: false" in out.stdout
    )
