"""`--help` is exactly the golden text in tests/config/fixtures/help.txt: every flag, its default,
its help and the order flags appear in stay as they are when the config tree's code moves
(issue 71 moved it into pivot/config/ without changing one byte of this).

A change to the help that is meant (a new flag, a docstring reworded, a preset added to the
description) regenerates the file, from the repository root:

    COLUMNS=120 python pivot/main.py --help > tests/config/fixtures/help.txt

and the diff of that file is reviewed with the change.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import os
import sys
from unittest import mock

import pytest

from pivot.cli import parse
from tests.conftest import ROOT

GOLDEN = ROOT / "tests" / "config" / "fixtures" / "help.txt"
WIDTH = 120
"""The terminal width the golden text was printed at (COLUMNS): tyro wraps help to it."""


def _help() -> str:
    # a utf-8 stream: tyro draws its boxes with "│" only where stdout's encoding is "utf-8"
    raw = io.BytesIO()
    out = io.TextIOWrapper(raw, encoding="utf-8")
    with (
        mock.patch.dict(os.environ, {"COLUMNS": str(WIDTH)}),
        mock.patch.object(sys, "argv", ["pivot/main.py"]),  # tyro's usage line names the script
        contextlib.redirect_stdout(out),
        pytest.raises(SystemExit) as exit_,
    ):
        parse(["--help"])
    assert exit_.value.code in (0, None)
    out.flush()
    return raw.getvalue().decode()


def test_help_is_the_golden_text() -> None:
    want, got = GOLDEN.read_text(encoding="utf-8"), _help()
    diff = "".join(
        difflib.unified_diff(
            want.splitlines(keepends=True), got.splitlines(keepends=True), str(GOLDEN), "--help"
        )
    )
    assert got == want, (
        f"--help changed (regenerate as this file's docstring says if meant):\n{diff}"
    )
