"""`--help` wraps every field's docstring as flowing text to the terminal width (COLUMNS)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import os
import sys
import typing
from unittest import mock

import docstring_parser
import pytest

from pivot.cli import parse
from pivot.config import PivotConfig
from pivot.config.cluster import ClusterConfig, PlannerConfig

WIDTHS = (80, 160)


@functools.cache
def _help(width: int) -> list[str]:
    # a utf-8 stream: tyro draws its boxes with "│" only where stdout's encoding is "utf-8"
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    with (
        mock.patch.dict(os.environ, {"COLUMNS": str(width)}),
        mock.patch.object(sys, "argv", ["pivot/main.py"]),  # tyro's usage line names it, unwrapped
        contextlib.redirect_stdout(out),
        pytest.raises(SystemExit) as exit_,
    ):
        parse(["--help"])
    assert exit_.value.code in (0, None)
    out.flush()
    return out.buffer.getvalue().decode().splitlines()  # type: ignore[attr-defined]


def _flags(cls: type, prefix: str = "--") -> list[str]:
    hints = typing.get_type_hints(cls)
    flags = []
    for f in dataclasses.fields(cls):
        t = hints[f.name]
        name = prefix + f.name.replace("_", "-")
        if isinstance(t, type) and dataclasses.is_dataclass(t):
            flags += _flags(t, name + ".")
        else:
            flags.append(name)
    return flags


def _help_block(lines: list[str], flag: str) -> list[str]:
    """The help lines under `flag`, from its box's column (tyro lays boxes out side by side)."""
    row = next(i for i, line in enumerate(lines) if f"│ {flag} " in line)
    start = lines[row].index(f"│ {flag} ") + 2
    end = lines[row].index("│", start)
    block = []
    for line in lines[row + 1 :]:
        text = line[start:end].rstrip()
        if not text.startswith("      "):  # the next flag, or the box's bottom
            return block
        block.append(text.strip())
    return block


@pytest.mark.parametrize("width", WIDTHS)
def test_help_fits_the_terminal_width(width: int) -> None:
    lines = _help(width)
    too_long = [line for line in lines if len(line) > width]
    assert not too_long, f"{len(too_long)} lines over {width} columns, first: {too_long[0]!r}"
    assert any(line.lstrip().startswith("Pivot: ") for line in lines)  # the description


@pytest.mark.parametrize("width", WIDTHS)
def test_help_shows_every_flag(width: int) -> None:
    text = "\n".join(_help(width))
    flags = _flags(PivotConfig)
    assert "--checkpoint.resume" in flags and "--reward.judge-template-file" in flags
    missing = [flag for flag in flags if f"│ {flag} " not in text and f"│ {flag}," not in text]
    assert not missing


@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(
    ("flag", "cls", "field"),
    [
        ("--planner.budget-s", PlannerConfig, "budget_s"),
        ("--cluster.device", ClusterConfig, "device"),
    ],
)
def test_multi_line_docstring_flows(width: int, flag: str, cls: type, field: str) -> None:
    doc = next(
        p.description for p in docstring_parser.parse_from_object(cls).params if p.arg_name == field
    )
    assert doc is not None and doc.count("\n") >= 2  # written over several source lines
    block = _help_block(_help(width), flag)
    # the words in order (tyro may split a word at a comma or one longer than the line)
    assert "".join(doc.split()) in "".join("".join(block).split())
    assert block[-1].endswith(")")  # "(default: ...)"
    text_width = max(map(len, block))
    short = [line for line in block[:-1] if len(line) < 0.4 * text_width]
    assert not short, f"ragged: {short}"
