"""tools/bench_sim.py's defaults: the period-aligned window, three seeds, given allocations."""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

import pytest

from pivot.sim.deploy import Allocation
from pivot.sim.window import Window

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
bench_sim = importlib.import_module("bench_sim")


def _args(steps: int | None = None, warmup: int | None = None) -> argparse.Namespace:
    return argparse.Namespace(steps=steps, warmup=warmup, staleness=2)


def test_default_window_is_four_warmup_steps_and_two_whole_periods() -> None:
    assert bench_sim.window_of(_args()) == Window(4, 6)
    assert bench_sim.window_of(_args(warmup=5)) == Window(5, 6)
    assert bench_sim.window_of(_args(steps=6, warmup=0)) == Window(0, 6)


def test_a_window_cutting_a_burst_is_run_with_a_warning(capsys: pytest.CaptureFixture[str]) -> None:
    assert bench_sim.window_of(_args(steps=7, warmup=3)) == Window(3, 4)
    assert "NOT whole periods of 3" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="--warmup 7"):
        bench_sim.window_of(_args(steps=7, warmup=7))


def test_given_allocations_parse() -> None:
    assert bench_sim.parse_use("disaggregated=8/8") == ("disaggregated", Allocation(8, 8))
    assert bench_sim.parse_use("pivot=16") == ("pivot", Allocation(16))
    with pytest.raises(SystemExit, match="NAME=T"):
        bench_sim.parse_use("pivot=lots")
