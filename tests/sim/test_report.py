"""The critical-path bound and the device-time breakdown of simulated runs."""
from __future__ import annotations

import dataclasses

import pytest

from pivot.sim import LengthDist, SimOptions, Workload, simulate
from pivot.sim.costs import build_cluster
from pivot.sim.deploy import DEPLOYMENTS, Allocation, deployment
from pivot.sim.report import breakdown, chain_s, critical_path_s, shift_ups_per_step
from pivot.sim.result import ShiftEvent
from tests.sim.conftest import small_cfg


def _alloc(name: str) -> Allocation | None:
    return Allocation(2, 3) if name == "disaggregated" else None


def test_chain_is_the_sum_of_single_sequence_steps(opts: SimOptions) -> None:
    c = build_cluster(small_cfg(), opts.hardware)[1].roles["rollout"]
    m = c.throughput
    want = c.prefill_s_per_token * 100 + sum(m.latency(1, 100 + k) for k in range(37))
    assert chain_s(c, 100, 37) == pytest.approx(want)


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_no_run_beats_its_bound_and_device_time_adds_up(name: str, opts: SimOptions) -> None:
    res = simulate(deployment(small_cfg(), name, _alloc(name)), opts)
    assert critical_path_s(res) <= res.sim_time_s * (1 + 1e-9)
    b = breakdown(res)
    parts = sum(t.busy + t.idle + t.shifting for t in b.roles.values()) + b.unassigned
    assert parts == pytest.approx(b.total) and b.total == pytest.approx(8 * res.sim_time_s)
    assert all(min(t.busy, t.idle, t.shifting) >= 0 for t in b.roles.values())
    assert b.roles["rollout"].busy > 0 and b.roles["reward"].busy > 0 and b.roles["train"].busy > 0


def test_lone_sample_on_a_static_cluster_meets_the_bound_exactly(opts: SimOptions) -> None:
    # one sample per step, nothing to queue behind: the run is its own critical path
    lone = Workload(prompt=LengthDist(100, 0.0, 512), response=LengthDist(300, 0.5, 3000),
                    judge=LengthDist(200, 0.5, 3000), prompts_per_step=1, group_size=1)
    res = simulate(deployment(small_cfg(), "disaggregated", Allocation(2, 3)), dataclasses.replace(opts, workload=lone))
    assert res.sim_time_s == pytest.approx(critical_path_s(res))


def test_static_deployment_neither_shifts_nor_leaves_devices_unassigned(opts: SimOptions) -> None:
    b = breakdown(simulate(deployment(small_cfg(), "disaggregated", Allocation(2, 3)), opts))
    assert b.unassigned == pytest.approx(0.0, abs=1e-6)
    assert all(t.shifting == 0 for t in b.roles.values())


def test_pivot_spends_device_time_shifting(opts: SimOptions) -> None:
    b = breakdown(simulate(deployment(small_cfg(), "pivot"), dataclasses.replace(opts, steps=5)))
    assert b.roles["train"].shifting > 0 and b.roles["rollout"].shifting + b.roles["reward"].shifting > 0


def test_shift_ups_per_step_counts_inference_ups_in_the_window(opts: SimOptions) -> None:
    res = simulate(deployment(small_cfg(), "disaggregated", Allocation(2, 3)), opts)
    # window from the end of step 0 (t=10) over steps 1-2: the rollout and reward ups at or after
    # 10 s count; the earlier up, the shift-down and training's up do not
    events = [ShiftEvent(5.0, 6.0, 0, "rollout", True), ShiftEvent(10.0, 11.0, 1, "rollout", True),
              ShiftEvent(12.0, 13.0, 2, "reward", True), ShiftEvent(15.0, 16.0, 1, "rollout", False),
              ShiftEvent(16.0, 20.0, 3, "train", True)]
    res = dataclasses.replace(res, shifts=events, step_end_s=[10.0, 20.0, 30.0], warmup_steps=1)
    assert shift_ups_per_step(res) == 1.0
