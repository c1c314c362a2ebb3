from __future__ import annotations

import dataclasses

import pytest

from configs.presets import paper_preset
from pivot.plan import make_planner
from pivot.sim import SimConfigError, SimOptions, simulate
from pivot.sim.deploy import DEPLOYMENTS, Allocation, deployment, search
from tests.sim.conftest import small_cfg


def _alloc(name: str) -> Allocation | None:
    return Allocation(2, 3) if name == "disaggregated" else None


@pytest.mark.parametrize("name", DEPLOYMENTS)
def test_every_sample_generated_and_rewarded_exactly_once(name: str, opts: SimOptions) -> None:
    res = simulate(deployment(small_cfg(), name, _alloc(name)), opts)
    assert len(res.step_end_s) == opts.steps
    keys = {(st, i) for st in range(opts.steps) for i in range(16)}
    assert set(res.rollout_done) == keys and set(res.reward_done) == keys
    assert set(res.rollout_done.values()) == {1} and set(res.reward_done.values()) == {1}
    assert res.throughput > 0


def test_deterministic_with_seed(opts: SimOptions) -> None:
    cfg = deployment(small_cfg(), "pivot")
    a, b = simulate(cfg, opts), simulate(cfg, opts)
    assert a.sim_time_s == b.sim_time_s and a.shifts == b.shifts
    cfg.seed = 1
    assert simulate(cfg, opts).sim_time_s != a.sim_time_s


@pytest.mark.parametrize("name", ["disaggregated", "rr_colocated", "colocated"])
def test_static_deployment_more_devices_never_slower(name: str, opts: SimOptions) -> None:
    times = []
    for nnodes in (1, 2, 4):
        cfg = small_cfg(nnodes=nnodes)
        alloc = Allocation(2, 3 * (8 * nnodes - 2) // 6) if name == "disaggregated" else None
        times.append(simulate(deployment(cfg, name, alloc), opts).sim_time_s)
    assert times == sorted(times, reverse=True), times


def test_more_rollout_devices_never_slower_when_rollout_bound(opts: SimOptions) -> None:
    slow = simulate(deployment(small_cfg(), "disaggregated", Allocation(2, 1)), opts)
    fast = simulate(deployment(small_cfg(), "disaggregated", Allocation(2, 3)), opts)
    assert fast.sim_time_s <= slow.sim_time_s


@pytest.mark.parametrize("name", ["pivot", "static", "rule_based", "vanilla", "vanilla+tm"])
def test_planner_decisions_equal_fresh_planner_on_same_snapshots(
    name: str, opts: SimOptions
) -> None:
    cfg = deployment(small_cfg(), name)
    res = simulate(cfg, dataclasses.replace(opts, record_plans=True))
    assert res.plans and res.num_plans > 0
    fresh = make_planner(cfg.planner)
    for snap, plan in res.plans:
        again = fresh.plan(snap)
        assert (again is None) == (plan is None)
        if plan is not None:
            assert (again.up_role, again.up, again.down) == (plan.up_role, plan.up, plan.down)
            assert again.benefit == pytest.approx(plan.benefit)


def test_pivot_shifts_training_up_and_back(opts: SimOptions) -> None:
    opts = dataclasses.replace(opts, steps=5)  # step 3's prompts wait for step 0's update
    res = simulate(deployment(small_cfg(), "pivot"), opts)
    train = [s for s in res.shifts if s.role == "train"]
    assert any(s.up for s in train) and any(not s.up for s in train)
    assert len(res.train_s) == opts.steps


def test_planner_sees_shift_times_on_the_simulated_clock(opts: SimOptions) -> None:
    """A timed plan lasts one release (of whichever role gave up the devices) plus the acquire of
    the role brought up, both at the cost model's times, so each role's mean lies between."""
    res = simulate(
        deployment(small_cfg(), "pivot"), dataclasses.replace(opts, steps=5, record_plans=True)
    )
    measured = res.plans[-1][0].shift_s
    assert measured
    downs = [res.costs.shift_s(role, False) for role in ("rollout", "reward", "train")]
    for role, tau in measured.items():
        up = res.costs.shift_s(role, True)
        assert min(downs) + up - 1e-9 <= tau <= max(downs) + up + 1e-9


def test_model_too_big_for_tp_group_fails_clearly() -> None:
    cfg = paper_preset("qwen2.5-72b+qwen3.5-122b-a10b")
    cfg.rollout.tp = 1
    with pytest.raises(SimConfigError, match="rollout.tp=1"):
        simulate(cfg, SimOptions(steps=1))


def test_training_pool_bigger_than_cluster_fails_clearly() -> None:
    cfg = small_cfg()
    cfg.train.devices = 16
    with pytest.raises(SimConfigError, match="train.devices"):
        simulate(cfg, SimOptions(steps=1))


def test_training_state_must_fit() -> None:
    cfg = paper_preset("qwen2.5-72b+qwen3.5-122b-a10b")
    cfg.train.devices = 8
    with pytest.raises(SimConfigError, match="train.devices=8"):
        simulate(cfg, SimOptions(steps=1))


def test_search_reports_every_point(opts: SimOptions) -> None:
    best, points = search(small_cfg(), "disaggregated", dataclasses.replace(opts, steps=2))
    assert len(points) >= 3 and best in [p.alloc for p in points]
    assert max(p.throughput for p in points) == next(
        p.throughput for p in points if p.alloc == best
    )
