"""The critical-path bound and the device-time breakdown of simulated runs."""

from __future__ import annotations

import dataclasses

import pytest

from pivot.sched import ThroughputModel
from pivot.sim import LengthDist, SimOptions, Workload, simulate
from pivot.sim.costs import build_cluster
from pivot.sim.deploy import DEPLOYMENTS, Allocation, deployment
from pivot.sim.report import (
    bound_s,
    bound_share,
    breakdown,
    chain_s,
    critical_path_s,
    decode_work_s,
    prefill_tokens_lower,
    shift_ups_per_step,
    work_bound_s,
    work_s,
)
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
    assert 0 < work_bound_s(res) <= res.sim_time_s * (1 + 1e-9)
    assert bound_s(res)[0] == max(critical_path_s(res), work_bound_s(res))
    b = breakdown(res)
    parts = sum(t.busy + t.idle + t.shifting for t in b.roles.values()) + b.unassigned
    assert parts == pytest.approx(b.total) and b.total == pytest.approx(8 * res.sim_time_s)
    assert all(min(t.busy, t.idle, t.shifting) >= 0 for t in b.roles.values())
    assert b.roles["rollout"].busy > 0 and b.roles["reward"].busy > 0 and b.roles["train"].busy > 0


def test_lone_sample_on_a_static_cluster_meets_the_bound_exactly(opts: SimOptions) -> None:
    # one sample per step, nothing to queue behind: the run is its own critical path
    lone = Workload(
        prompt=LengthDist(100, 0.0, 512),
        response=LengthDist(300, 0.5, 3000),
        judge=LengthDist(200, 0.5, 3000),
        prompts_per_step=1,
        group_size=1,
    )
    res = simulate(
        deployment(small_cfg(), "disaggregated", Allocation(2, 3)),
        dataclasses.replace(opts, workload=lone),
    )
    assert res.sim_time_s == pytest.approx(critical_path_s(res))


def test_static_deployment_neither_shifts_nor_leaves_devices_unassigned(opts: SimOptions) -> None:
    b = breakdown(simulate(deployment(small_cfg(), "disaggregated", Allocation(2, 3)), opts))
    assert b.unassigned == pytest.approx(0.0, abs=1e-6)
    assert all(t.shifting == 0 for t in b.roles.values())


def test_pivot_spends_device_time_shifting(opts: SimOptions) -> None:
    b = breakdown(simulate(deployment(small_cfg(), "pivot"), dataclasses.replace(opts, steps=5)))
    assert (
        b.roles["train"].shifting > 0
        and b.roles["rollout"].shifting + b.roles["reward"].shifting > 0
    )


def test_shift_ups_per_step_counts_inference_ups_in_the_window(opts: SimOptions) -> None:
    res = simulate(deployment(small_cfg(), "disaggregated", Allocation(2, 3)), opts)
    # window from the end of step 0 (t=10) over steps 1-2: the rollout and reward ups at or after
    # 10 s count; the earlier up, the shift-down and training's up do not
    events = [
        ShiftEvent(5.0, 6.0, 0, "rollout", True),
        ShiftEvent(10.0, 11.0, 1, "rollout", True),
        ShiftEvent(12.0, 13.0, 2, "reward", True),
        ShiftEvent(15.0, 16.0, 1, "rollout", False),
        ShiftEvent(16.0, 20.0, 3, "train", True),
    ]
    res = dataclasses.replace(res, shifts=events, step_end_s=[10.0, 20.0, 30.0], warmup_steps=1)
    assert shift_ups_per_step(res) == 1.0


def test_decode_work_at_best_batch_by_hand(opts: SimOptions) -> None:
    c = build_cluster(small_cfg(), opts.hardware)[1].roles["rollout"]
    c = dataclasses.replace(c, throughput=ThroughputModel(1e-6, 0.01, 1e-4, 0.002))
    # (prompt 10, 3 tokens) and (prompt 5, 2 tokens): contexts 10+11+12 + 5+6 = 44; at 64 per step
    # each token costs (max(0.01, 64e-4) + 0.002) / 64 = 1.875e-4 s
    assert decode_work_s(c, 44, 5, 64) == pytest.approx(44e-6 + 5 * 1.875e-4)
    # compute-bound past the knee B / C = 100: at 200, (0.02 + 0.002) / 200 per token
    assert decode_work_s(c, 0, 10, 200) == pytest.approx(10 * 0.022 / 200)


def test_shared_prefixes_are_prefilled_once() -> None:
    common, g1, g2 = ("rollout",), ("rollout", 0, 1), ("rollout", 0, 2)
    prompts = [(((common, 40), (g1, 100)), 100)] * 3 + [(((common, 40), (g2, 80)), 80)]
    assert (
        prefill_tokens_lower(prompts) == 40 + 60 + 40
    )  # the common part once, each group's rest once
    # a judge prompt: template (150 shared), question (shared by its group), then its own response
    judges = [
        (((("reward",), 150), (("reward", 0, 1), 150 + 30)), 150 + 30 + 20 + r) for r in (7, 9)
    ]
    assert prefill_tokens_lower(judges) == 150 + 30 + (20 + 7) + (20 + 9)


def test_work_bound_of_a_static_deployment_by_hand(opts: SimOptions) -> None:
    res = simulate(deployment(small_cfg(), "disaggregated", Allocation(2, 3)), opts)
    ro, rm = res.costs.roles["rollout"], res.costs.roles["reward"]
    samples = [s for st in range(res.steps) for s in res.samples[st]]
    w = res.workload

    def decode(c, pairs):  # noqa: ANN001, ANN202 - every token at the best batch, summed token by token
        m, n = c.throughput, min(c.max_running, c.kv_capacity // (min(p for p, _ in pairs) + 1))
        return sum(
            m.A * (p + k) + (max(m.B, m.C * n) + m.D) / n for p, out in pairs for k in range(out)
        )

    groups = {(s.step, s.group): s.prompt_len for s in samples}
    ro_prefill = w.prompt_common_tokens + sum(p - w.prompt_common_tokens for p in groups.values())
    rm_prefill = (
        w.judge_common_tokens
        + sum(groups.values())
        + sum(s.judge_prompt_len - w.judge_common_tokens - s.prompt_len for s in samples)
    )
    w_ro = (
        decode(ro, [(s.prompt_len, s.response_len) for s in samples])
        + ro.prefill_s_per_token * ro_prefill
    )
    w_rm = (
        decode(rm, [(s.judge_prompt_len, s.judge_len) for s in samples])
        + rm.prefill_s_per_token * rm_prefill
    )
    w_tr = 2 * sum(res.train_s)
    assert work_s(res) == pytest.approx({"rollout": w_ro, "reward": w_rm, "train": w_tr})
    # pools: rollout 3 devices, reward 3, training 2 (TP 1); any set of roles over its devices
    pools = {"rollout": 3, "reward": 3, "train": 2}
    work = {"rollout": w_ro, "reward": w_rm, "train": w_tr}
    sets = [
        ("rollout",),
        ("reward",),
        ("train",),
        ("rollout", "reward"),
        ("rollout", "train"),
        ("reward", "train"),
        ("rollout", "reward", "train"),
    ]
    want = max(sum(work[r] for r in s) / sum(pools[r] for r in s) for s in sets)
    assert work_bound_s(res) == pytest.approx(max(want, sum(res.train_s)))


@pytest.mark.parametrize("train_devices", [1, 2, 4])
def test_bound_share_is_the_runs_own(train_devices: int, opts: SimOptions) -> None:
    """PivotRL at three training slots of one 8-device host: its bound is the larger of the
    critical path and the cluster's work over its 8 devices (every inference slot may take any
    device; training's own steps back to back are inside both), its kind names which ("train"
    when it is those steps), and its share is the run's tokens/s over the bound's."""
    res = simulate(deployment(small_cfg(train_devices=train_devices), "pivot"), opts)
    cp = critical_path_s(res)
    assert sum(res.train_s[res.warmup_steps : res.steps]) <= cp * (1 + 1e-12)
    cluster = max(sum(work_s(res).values()) / 8, sum(res.train_s))
    want = (cluster, "work") if cluster > cp else (cp, "path")
    if want[0] <= sum(res.train_s) * (1 + 1e-9):
        want = (want[0], "train")
    got = bound_s(res)
    assert got[1] == want[1] and got[0] == pytest.approx(want[0])
    assert bound_share(res) == pytest.approx((res.tokens / res.measured_s) / (res.tokens / got[0]))


def test_a_training_bound_run_names_its_train_bound(opts: SimOptions) -> None:
    """A trainer 45x slower than nominal: in the steady state every step waits for training,
    the bound is the measured steps' training back to back ("train"), met in full; the bench's
    57% and 92% for one deployment at two slots were a "work" and such a bound."""
    slow = dataclasses.replace(opts.hardware, train_mfu=0.01)
    res = simulate(
        deployment(small_cfg(train_devices=1), "pivot"),
        dataclasses.replace(opts, hardware=slow, steps=4, warmup_steps=1),
    )
    assert bound_s(res) == (pytest.approx(sum(res.train_s[1:4])), "train")
    assert bound_share(res) == pytest.approx(1.0)
