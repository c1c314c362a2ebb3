"""The shift penalty with KV-preserving migration (`planner.kv_migration`): the discarded KV of a
shifted-down replica is priced at `kv_refill_share` of its re-prefill, by hand on Figure 8."""

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
