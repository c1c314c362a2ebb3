"""The engines' counters in each metrics row (pivot/runtime/control/reports.py `kv_metrics`)."""

from __future__ import annotations

import pytest

from pivot.engine.sequence import EngineStats
from pivot.runtime.control.reports import kv_metrics


def test_decode_graph_captures_are_summed_over_the_replicas() -> None:
    """Each shift up captures again the buckets its batches reach: the run's rows say how many
    and how long, summed over the replicas (cumulative, as the engines count them)."""
    base = dict(
        n_seq=0, n_tok=0, kv_free_tokens=0, kv_total_tokens=0, tokens_generated=0,
        last_step_latency_s=0.0, weights_version=0,
    )  # fmt: skip
    stats = [
        EngineStats(**base, graphs_captured=6, graphs_capture_s=0.5, prefill_tokens=10),
        EngineStats(**base, graphs_captured=2, graphs_capture_s=0.25),
    ]
    row = kv_metrics(stats)
    assert row["count/graphs_captured"] == 8
    assert row["time/graphs_capture_s"] == pytest.approx(0.75)
    assert row["count/prefill_tokens"] == 10
