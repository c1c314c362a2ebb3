"""The training slot sized by measurement, on the simulator (pivot/sim/autosize.py): a re-size
during a run (`SimOptions.resizes`) loses and repeats no sample and happens only where the
runtime would do it; the search keeps to its CPU budget, scores the current slot first and
agrees with the baselines' search; a decision needs its gain; calibration scales what it says
and a run's first step measures it."""

from __future__ import annotations

import dataclasses
from dataclasses import astuple

import pytest

from pivot.sched import Role, ThroughputModel
from pivot.shift import ShiftError
from pivot.sim import SimOptions, simulate
from pivot.sim.autosize import (
    Sizing,
    decide,
    engine_calibration,
    label,
    measured,
    modelled_costs,
    replay,
    size_slot,
)
from pivot.sim.band import options_at
from pivot.sim.costs import build_cluster
from pivot.sim.deploy import Allocation, SearchPoint, deployment, search
from pivot.sim.options import Calibration, EngineCalibration, Resize
from pivot.sim.simulator import Simulator
from tests.sim.conftest import small_cfg


def _exactly_once(res, steps: int) -> None:  # noqa: ANN001
    keys = {(st, i) for st in range(steps) for i in range(16)}
    assert set(res.rollout_done) == keys and set(res.reward_done) == keys
    assert set(res.rollout_done.values()) == {1} and set(res.reward_done.values()) == {1}


def test_a_resize_after_a_step_moves_the_slot_at_a_step_boundary(opts: SimOptions) -> None:
    steps = 4
    run = dataclasses.replace(opts, steps=steps, resizes=(Resize(1, 4, delay_s=0.0),))
    res = simulate(deployment(small_cfg(train_devices=2), "pivot"), run)
    _exactly_once(res, steps)
    assert res.resized_at_s and len(res.resized_at_s) == 1
    train = res.table.replicas[res.table.train_rid]
    assert train.devices == (4, 5, 6, 7)  # the last devices, as pivot.dist.train_slot tiles it
    # it waited for step 1's end and no step trained until it was done
    at = res.resized_at_s[0]
    assert res.step_end_s[0] <= at < res.step_end_s[1] - res.train_s[1]
    before = simulate(deployment(small_cfg(train_devices=2), "pivot"), opts)
    assert res.train_s[1] < before.train_s[1] * 0.6  # 4 devices train the same step in half


def test_a_decision_made_during_a_step_waits_for_its_end(opts: SimOptions) -> None:
    first = simulate(deployment(small_cfg(train_devices=2), "pivot"), opts)
    step_1_to_2 = first.step_end_s[1] - first.step_end_s[0]
    late = Resize(1, 4, delay_s=step_1_to_2 / 2)  # decided while step 2 is under way
    res = simulate(
        deployment(small_cfg(train_devices=2), "pivot"),
        dataclasses.replace(opts, steps=4, resizes=(late,)),
    )
    _exactly_once(res, 4)
    assert res.resized_at_s[0] >= res.step_end_s[1]  # after step 2 ended, not during it


def test_a_startup_decision_takes_effect_before_the_first_step(opts: SimOptions) -> None:
    res = simulate(
        deployment(small_cfg(train_devices=2), "pivot"),
        dataclasses.replace(opts, resizes=(Resize(0, 4, delay_s=1.0),)),
    )
    _exactly_once(res, opts.steps)
    assert res.resized_at_s[0] < res.step_end_s[0] - res.train_s[0]


def test_a_decision_with_a_reserved_split_sets_the_planners_reserves(opts: SimOptions) -> None:
    cfg = deployment(small_cfg(train_devices=2), "pivot", Allocation(2, 2))
    assert (cfg.planner.reserve_rollout, cfg.planner.reserve_reward) == (2, 4)
    cleared = deployment(cfg, "pivot", Allocation(2)).planner  # the allocation's, not the base's
    assert (cleared.reserve_rollout, cleared.reserve_reward) == (0, 0)
    sim = Simulator(
        deployment(small_cfg(train_devices=2), "pivot"),
        dataclasses.replace(opts, resizes=(Resize(0, 4, delay_s=1.0, rollout_reserve=2),)),
    )
    _exactly_once(sim.run(), opts.steps)
    planner = sim.mode.planner  # type: ignore[attr-defined]  (pivot mode: Shiftable)
    assert (planner.cfg.reserve_rollout, planner.cfg.reserve_reward) == (2, 8 - 4 - 2)


def test_the_slot_moves_only_while_the_trainer_is_down(opts: SimOptions) -> None:
    cluster = Simulator(deployment(small_cfg(train_devices=2), "pivot"), opts).cluster
    cluster.shifts.bring_up([cluster.train_rid])
    with pytest.raises(ShiftError, match="cannot be re-sized while up"):
        cluster.resize_training(range(4, 8))
    others = cluster.table.replicas[: cluster.train_rid]
    cluster.shifts.states.start(cluster.train_rid, up=False)
    cluster.shifts.states.finish(cluster.train_rid)
    cluster.resize_training(range(4, 8))
    assert cluster.table.replicas[: cluster.train_rid] == others  # every other replica as it was
    assert cluster.table.replicas[cluster.train_rid].devices == (4, 5, 6, 7)
    assert cluster.shifts.table is cluster.table and cluster.shifts.states.table is cluster.table


def test_the_search_keeps_to_its_budget_and_scores_the_current_slot_first(
    opts: SimOptions,
) -> None:
    cfg = deployment(small_cfg(train_devices=2), "pivot")
    cut = size_slot(cfg, opts, budget_s=1e-9)
    assert [p.alloc.train_devices for p in cut.points] == [2] and not cut.complete
    whole = size_slot(cfg, opts, budget_s=float("inf"))
    assert whole.complete and whole.points[0].alloc == Allocation(2)
    best, points = search(cfg, "pivot", opts)
    assert whole.best.alloc == best  # the baselines' search, the same grid and edge steps
    free = {p.alloc for p in whole.points if not p.alloc.rollout_devices}  # and the held splits
    assert free == {p.alloc for p in points}
    assert "T2:" in whole.line() and f"-> T{best.train_devices}" in whole.line()


def test_the_search_pins_each_slots_held_split_after_the_slots(opts: SimOptions) -> None:
    cfg = deployment(small_cfg(nnodes=2, train_devices=2), "pivot")
    whole = size_slot(cfg, opts, budget_s=float("inf"))
    free = [p for p in whole.points if not p.alloc.rollout_devices]
    pinned = [p.alloc for p in whole.points if p.alloc.rollout_devices]
    assert whole.points[: len(free)] == tuple(free)  # every free slot scored before any split
    expected = []
    for p in sorted(free, key=lambda p: -p.throughput):  # best first: a budget cuts the worst
        run = p.runs[cfg.seed]  # the split its run held: rollout's share of the inference devices
        held = [q.devices for q in run.timeline if q.t >= run.window_start_s]
        share = sum(d.get("rollout", 0) for d in held) / sum(
            d.get("rollout", 0) + d.get("reward", 0) for d in held
        )
        ro = round(share * (16 - p.alloc.train_devices))  # TP 1: every device is a replica
        if 0 < ro < 16 - p.alloc.train_devices:
            expected.append(Allocation(p.alloc.train_devices, ro))
    assert pinned == expected and pinned
    assert label(pinned[0]) + ":" in whole.line()
    # a search from a reserved split scores it first, and the free slot beside it too
    again = size_slot(deployment(cfg, "pivot", pinned[0]), opts, budget_s=float("inf"))
    assert again.current == pinned[0] == again.points[0].alloc
    assert Allocation(pinned[0].train_devices) in [p.alloc for p in again.points]


def _sizing(current: int, predicted: dict[int, float]) -> Sizing:
    points = tuple(SearchPoint(Allocation(t), v) for t, v in predicted.items())
    return Sizing(Allocation(current), points, 0.1, True)


def test_a_resize_needs_its_gain() -> None:
    assert decide(_sizing(2, {2: 100.0, 4: 104.0}), 0.05) is None
    assert decide(_sizing(2, {2: 100.0, 4: 106.0}), 0.05) == Allocation(4)
    assert decide(_sizing(4, {2: 90.0, 4: 100.0}), 0.0) is None  # the current is the best
    assert decide(_sizing(2, {2: 0.0, 4: 0.0}), 0.0) is None  # nothing could run


def test_calibration_scales_the_costs(opts: SimOptions) -> None:
    cfg = deployment(small_cfg(train_devices=2), "pivot")
    base = modelled_costs(cfg, opts)  # the cost model as it is, whatever opts' calibration
    twice = Calibration(EngineCalibration((2.0, 2.0, 2.0, 2.0), prefill=2.0))
    assert modelled_costs(cfg, dataclasses.replace(opts, calibration=twice)) == base
    slower = build_cluster(cfg, opts.hardware, calibration=dataclasses.replace(twice, train=3.0))[1]
    a, b = base.roles[Role.ROLLOUT], slower.roles[Role.ROLLOUT]
    assert b.throughput.throughput(8, 8000) == pytest.approx(a.throughput.throughput(8, 8000) / 2)
    assert b.prefill_s_per_token == pytest.approx(2 * a.prefill_s_per_token)
    assert slower.roles[Role.REWARD] == base.roles[Role.REWARD]
    assert slower.train_s(2, 10_000) == pytest.approx(3 * base.train_s(2, 10_000))
    shape = Calibration(reward=EngineCalibration((1.0, 4.0, 1.0, 0.0)))  # B x4, no D
    m, k = (
        base.roles[Role.REWARD].throughput,
        build_cluster(cfg, opts.hardware, calibration=shape)[1],
    )
    assert k.roles[Role.REWARD].throughput == ThroughputModel(m.A, 4 * m.B, m.C, 0.0)
    shifting = build_cluster(cfg, opts.hardware, calibration=Calibration(train_shift=2.0))[1]
    for up in (True, False):
        assert shifting.shift_s(Role.TRAIN, up) == pytest.approx(2 * base.shift_s(Role.TRAIN, up))
        assert shifting.shift_s(Role.ROLLOUT, up) == base.shift_s(Role.ROLLOUT, up)
        wider = base.resized(4)  # the slot's own size prices its shifts, calibrated alike
        assert shifting.resized(4).shift_s(Role.TRAIN, up) == pytest.approx(
            2 * wider.shift_s(Role.TRAIN, up)
        )


def test_a_run_measures_the_corners_shifts_after_its_first_step(opts: SimOptions) -> None:
    cfg = deployment(small_cfg(train_devices=2), "pivot")
    said, real = modelled_costs(cfg, opts), modelled_costs(cfg, options_at(opts, "slow"))
    startup = Calibration(
        *(
            engine_calibration(real.roles[r].profile, said.roles[r].profile)
            for r in (Role.ROLLOUT, Role.REWARD)
        )
    )
    for r in (Role.ROLLOUT, Role.REWARD):  # the profile gives the corner's decode exactly
        calibrated = build_cluster(cfg, opts.hardware, calibration=startup)[1].roles[r]
        assert astuple(calibrated.throughput) == pytest.approx(astuple(real.roles[r].throughput))
        # ... and its prefill, which the corner prices apart (pivot/sim/band.py prefill_eff)
        assert real.roles[r].prefill_s_per_token != said.roles[r].prefill_s_per_token
        assert calibrated.prefill_s_per_token == pytest.approx(real.roles[r].prefill_s_per_token)
    known = measured(startup, said, real, 4)
    assert known.rollout.decode == startup.rollout.decode
    for role in Role:  # an up and a down of each role, measured over modelled
        slow = sum(real.resized(4).shift_s(role, up) for up in (True, False))
        assert known.shift(role) == pytest.approx(
            slow / sum(said.resized(4).shift_s(role, up) for up in (True, False))
        )
        assert known.shift(role) > 1  # the slow corner's shifts are slower
    assert known.train == pytest.approx(real.train_s(4, 10**6) / said.train_s(4, 10**6))
    calibrated = build_cluster(cfg, opts.hardware, calibration=known)[1]
    assert calibrated.resized(4).shift_s(Role.TRAIN, True) == pytest.approx(
        real.resized(4).shift_s(Role.TRAIN, True), rel=0.3
    )  # one scale for a role's ups and downs: close, not exact


def test_replay_learns_the_corner_a_run_lands_on(opts: SimOptions) -> None:
    cfg = deployment(small_cfg(train_devices=2), "pivot")
    resizes, sizings = replay(cfg, opts, opts, min_gain=0.05)
    assert len(sizings) == 2  # at start-up, after step 1
    at_nominal = size_slot(cfg, opts, float("inf")).best.alloc.train_devices
    assert [r.train_devices for r in resizes][-1:] in ([], [at_nominal])
    fast = options_at(opts, "fast")
    resizes, _ = replay(cfg, opts, fast, min_gain=0.0)
    final = resizes[-1].train_devices if resizes else 2
    run = simulate(cfg, dataclasses.replace(fast, resizes=resizes))
    assert len(run.table.replicas[run.table.train_rid].devices) == final
    _exactly_once(run, opts.steps)
