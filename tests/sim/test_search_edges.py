"""The allocation search steps past its starting grid while the best point sits on the grid's
edge, so no deployment (baseline or Pivot) is left at an optimum the grid merely cut off.

The objective is a made-up function of the allocation standing in for the simulator: the search
must find its peak wherever it lies, whatever the simulator would say.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from configs.presets import paper_preset
from pivot.config import PivotConfig
from pivot.sim import SimConfigError, SimOptions, deploy
from pivot.sim.deploy import Allocation, beyond_edges, candidate_allocations, search

GROUP = "qwen2.5-1.5b+glm-z1-9b"  # 32 devices, 8 a node, rollout TP1, GenRM TP1


@dataclass
class _Run:
    throughput: float


def _fake_simulate(peak_train: int, peak_rollout: int = 0, too_small: int = 0):  # noqa: ANN202
    """A unimodal objective around (peak_train, peak_rollout); a pool under `too_small` fails as
    the simulator fails an allocation whose training state does not fit."""

    def simulate(cfg: PivotConfig, opts: SimOptions) -> _Run:
        train = cfg.train.devices
        if train < too_small:
            raise SimConfigError(f"train.devices={train}: the training state does not fit")
        rollout = (
            cfg.rollout.replicas * cfg.rollout.tp if cfg.cluster.mode == "disaggregated" else 0
        )
        return _Run(1000.0 - abs(train - peak_train) * 10 - abs(rollout - peak_rollout))

    return simulate


def _search(monkeypatch: pytest.MonkeyPatch, name: str, **peak: int) -> tuple[Allocation, list]:
    monkeypatch.setattr(deploy, "simulate", _fake_simulate(**peak))
    return search(paper_preset(GROUP), name, SimOptions())


def test_the_starting_grid_is_the_documented_one() -> None:
    base = paper_preset(GROUP)
    assert [a.train_devices for a in candidate_allocations(base, "pivot")] == [4, 8, 16]
    assert candidate_allocations(base, "disaggregated")[:3] == [
        Allocation(4, 9),
        Allocation(4, 14),
        Allocation(4, 19),
    ]


def test_an_interior_best_adds_nothing() -> None:
    base = paper_preset(GROUP)
    tried = candidate_allocations(base, "pivot")
    assert beyond_edges(base, "pivot", Allocation(8), tried) == []


@pytest.mark.parametrize("peak", [1, 2, 24])
def test_the_search_follows_the_peak_past_either_edge(
    monkeypatch: pytest.MonkeyPatch, peak: int
) -> None:
    best, points = _search(monkeypatch, "pivot", peak_train=peak)
    assert best == Allocation(peak)
    assert {Allocation(t) for t in (4, 8, 16)} <= {p.alloc for p in points}


def test_a_pool_that_cannot_run_ends_the_walk(monkeypatch: pytest.MonkeyPatch) -> None:
    best, points = _search(monkeypatch, "rr_colocated", peak_train=1, too_small=4)
    assert best == Allocation(4)
    failed = [p for p in points if p.error]
    assert [p.alloc for p in failed] == [Allocation(2)] and "does not fit" in failed[0].error


def test_disaggregated_walks_its_rollout_split_too(monkeypatch: pytest.MonkeyPatch) -> None:
    # at T8 the grid splits the 24 inference devices 8/16, 12/12, 16/8; the peak is at 22/2
    best, points = _search(monkeypatch, "disaggregated", peak_train=8, peak_rollout=22)
    assert best == Allocation(8, 22)
    best, _ = _search(monkeypatch, "disaggregated", peak_train=8, peak_rollout=2)
    assert best == Allocation(8, 2)
    # the walk halves: a peak between two of its steps is bracketed, not pinned
    best, _ = _search(monkeypatch, "disaggregated", peak_train=8, peak_rollout=3)
    assert best.rollout_devices in (2, 4)


def test_colocated_has_nothing_to_search(monkeypatch: pytest.MonkeyPatch) -> None:
    best, points = _search(monkeypatch, "colocated", peak_train=1)
    assert len(points) == 1 and best == points[0].alloc
