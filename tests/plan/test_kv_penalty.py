"""The shift penalty with KV-preserving migration (`planner.kv_migration`): the discarded KV of a
shifted-down replica is priced at `kv_refill_share` of its re-prefill (or the share the host
knows for its role: the simulator's), by hand on Figure 8."""

from __future__ import annotations

import dataclasses

import pytest

from pivot.config import ConfigError, PlannerConfig
from pivot.plan import PivotPlanner, Role, build_pairs
from pivot.plan.pairs import replica_rates
from tests.plan.fig8 import TRAIN_ID, figure8


def test_kv_migration_prices_the_transfer_not_the_recompute() -> None:
    """Figure 8's rollout pair 16-19: T_i = 4 / 0.017 each, re-prefill C * 2000 = 0.4 s each;
    moving the KV at share 0.25 costs 0.1 s: phi = 4 * (3 + 0.1) * 4 / 0.017 (3.4 without)."""
    snap = figure8()
    scheds = {r: snap.scheduler(r) for r in ("rollout", "reward")}
    rates = replica_rates(snap, scheds, binary=False)
    kept = build_pairs(snap, Role.REWARD, rates, tau_shift=3.0, share=0.25)[1]
    assert kept.down == (16, 17, 18, 19)
    assert kept.penalty == pytest.approx(4 * 3.1 * 4 / 0.017)
    for on, want in ((True, 3.1), (False, 3.4)):
        planner = PivotPlanner(
            PlannerConfig(tau_shift_s=3.0, kv_migration=on, kv_refill_share=0.25)
        )
        planner.plan(dataclasses.replace(snap, shift_s={"reward": 3.0}))
        cand = planner.last_candidates[2][0]
        assert cand.down == (16, 17, 18, 19, TRAIN_ID)
        assert cand.penalty == pytest.approx(4 * want * 4 / 0.017)


def test_kv_refill_share_is_checked() -> None:
    with pytest.raises(ConfigError, match="planner.kv_refill_share"):
        PlannerConfig(kv_refill_share=1.5)


def test_a_share_the_host_knows_per_role_overrides_the_configured_one() -> None:
    """The simulator prices each role's KV move from its cost model: Figure 8's rollout
    replicas at share 0.5 cost 0.2 s each to move, whatever `kv_refill_share` says."""
    snap = dataclasses.replace(figure8(), shift_s={"reward": 3.0}, kv_refill_share={"rollout": 0.5})
    planner = PivotPlanner(PlannerConfig(tau_shift_s=3.0, kv_migration=True, kv_refill_share=0.25))
    planner.plan(snap)
    cand = planner.last_candidates[2][0]
    assert cand.down == (16, 17, 18, 19, TRAIN_ID)
    assert cand.penalty == pytest.approx(4 * 3.2 * 4 / 0.017)
    off = PivotPlanner(PlannerConfig(tau_shift_s=3.0, kv_migration=False))
    off.plan(snap)  # without migration the KV is recomputed: the host's share does not apply
    assert off.last_candidates[2][0].penalty == pytest.approx(4 * 3.4 * 4 / 0.017)


def test_the_simulator_prices_each_roles_move_from_its_cost_model() -> None:
    from configs.presets import get_preset
    from pivot.sim import HARDWARE, SimOptions
    from pivot.sim.kv_move import KV_LINK_GB_S
    from pivot.sim.simulator import Simulator

    cfg = get_preset("qwen2.5-1.5b+glm-z1-9b")
    assert Simulator(cfg, SimOptions(hardware=HARDWARE["h200"], steps=2)).kv_refill_share() == {}
    cfg.planner.kv_migration = True
    sim = Simulator(cfg, SimOptions(hardware=HARDWARE["h200"], steps=2))
    shares = sim.kv_refill_share()
    for role, c in sim.costs.roles.items():
        # out of one replica and into the next, each device its 1/tp of the KV, over its link
        move = 2 * c.model.kv_bytes_per_token / (c.tp * KV_LINK_GB_S * 1e9)
        assert shares[role] == pytest.approx(move / c.throughput.C)
    assert sim.snapshot().kv_refill_share == shares
