"""The simulator's KV-preserving migration hook (`planner.kv_migration`): a sequence aborted on
one simulated replica and dispatched to another with its KV pays the transfer of the tokens it
had computed instead of their prefill, by hand; without the flag it re-prefills them all."""

from __future__ import annotations

import pytest

from pivot.sched import ThroughputModel
from pivot.sim.hardware import model_spec
from pivot.sim.kv_move import KV_LINK_GB_S, kv_move_s_per_token
from pivot.sim.replica import SimReplica

M = ThroughputModel(A=1e-6, B=0.01, C=0.002, D=0.003)


def _migrate(kv_per_tok: float | None) -> tuple[SimReplica, int]:
    src = SimReplica(0, M, 1000, prefill_per_tok=1.0, max_running=8, kv_per_tok=kv_per_tok)
    dst = SimReplica(1, M, 1000, prefill_per_tok=1.0, max_running=8, kv_per_tok=kv_per_tok)
    src.add(7, 40, 0, 100, 0.0)
    src.advance(src.clock + 0.5)  # some decode steps
    held = src.kv_held(7)
    gen = src.remove(7)
    assert gen > 0 and held == 40 + gen - 1  # every token but the last sampled one is in its cache
    dst.add(7, 40, gen, 100, 0.0, kept=held)
    return dst, gen


def test_kept_kv_pays_the_transfer_not_the_prefill() -> None:
    dst, gen = _migrate(kv_per_tok=0.01)
    assert dst.prefilled == 0 and dst.kv_moved == 40 + gen - 1
    assert dst.clock == pytest.approx(0.01 * (40 + gen - 1))


def test_without_kv_migration_it_reprefills() -> None:
    dst, gen = _migrate(kv_per_tok=None)
    assert dst.prefilled == 40 + gen and dst.kv_moved == 0
    assert dst.clock == pytest.approx(40 + gen)


def test_transfer_cost_per_token_by_hand() -> None:
    """Qwen2.5-7B: 28 layers x 4 KV heads x 128 x 2 (K, V) x 2 bytes = 57,344 B a token, out of
    one device and into another over KV_LINK_GB_S each; TP2 halves each device's share."""
    spec = model_spec("Qwen2.5-7B", 7.6)
    assert kv_move_s_per_token(spec, 1) == pytest.approx(2 * 57344 / (KV_LINK_GB_S * 1e9))
    assert kv_move_s_per_token(spec, 2) == pytest.approx(57344 / (KV_LINK_GB_S * 1e9))
