"""What the controller writes about the run (`ControllerReports`, a part that
`pivot.runtime.control.controller.Controller` holds and passes what each report needs): one metrics row
per training step (training, timing, and the counters the controller gathers: devices per role,
the flow's counters, the engines' prefill and KV-migration counters (`kv_metrics`, over each
replica's latest `Stats`, kept here), rejected frames, replica version repairs) and the monitor's
timeline sample of devices and tokens/s per role."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pivot.engine.sequence import REFUSALS, EngineStats

if TYPE_CHECKING:  # annotations only
    from pivot.runtime.control import messages as m
    from pivot.runtime.records.metrics import RunLog
    from pivot.runtime.records.progress import StepProgress


def kv_metrics(stats: Iterable[EngineStats]) -> dict[str, float]:
    """Prefill, KV migration and decode-graph counters summed over the replicas' engines
    (cumulative)."""
    st = list(stats)
    return {
        "count/prefill_tokens": sum(s.prefill_tokens for s in st),
        "count/reprefill_tokens": sum(s.reprefill_tokens for s in st),
        "count/graphs_captured": sum(s.graphs_captured for s in st),
        "time/graphs_capture_s": sum(s.graphs_capture_s for s in st),
        "count/kv_imported": sum(s.kv_imported for s in st),
        "count/kv_imported_tokens": sum(s.kv_imported_tokens for s in st),
        "count/kv_fallbacks": sum(s.kv_fallbacks for s in st),
        "count/kv_fallback_tokens": sum(s.kv_fallback_tokens for s in st),
        **{
            f"count/kv_refused_{r}": sum(getattr(s, f"kv_refused_{r}") for s in st)
            for r in REFUSALS
        },
    }


@dataclass
class ControllerReports:
    log: RunLog
    progress: StepProgress
    step_t0: float = field(default_factory=time.monotonic)  # when the step being reported began
    # rid -> (report time, tokens generated so far) at the previous monitor sample
    tokens_seen: dict[int, tuple[float, int]] = field(default_factory=dict)
    stats: dict[int, m.Stats] = field(default_factory=dict)  # rid -> its latest report

    def seen(self, rid: int, msg: m.Stats) -> None:
        """Replica `rid`'s latest report."""
        self.stats[rid] = msg

    def engine_counters(self) -> dict[str, float]:
        """`kv_metrics` over every replica's latest report."""
        return kv_metrics(s.stats for s in self.stats.values())

    def step(
        self,
        step: int,
        train_metrics: dict[str, float],
        train_s: float,
        devices: dict[str, int],
        counters: Mapping[str, float],
    ) -> None:
        """Step `step`'s metrics row (1 for the first step trained, as checkpoints and evals
        count): its training metrics, its wall time and training time, then `counters` (devices
        per role among them); the progress line gets `devices`."""
        now = time.monotonic()
        metrics = {
            **{f"train/{k}": v for k, v in train_metrics.items()},
            "time/step_s": now - self.step_t0,
            "time/train_s": train_s,
            **counters,
        }
        self.step_t0 = now
        self.log.step(step, metrics)
        self.progress.update(step, metrics, devices)

    def sample(
        self,
        role_of: Callable[[int], str],
        is_up: Callable[[int], bool],
        devices: dict[str, int],
        **extra: int,
    ) -> None:
        """The timeline's sample: `devices` per role and each role's tokens/s since the previous
        sample, over the replicas up now (from each replica's latest report)."""
        rates = {"rollout": 0.0, "reward": 0.0}
        for rid, st in self.stats.items():
            role = role_of(rid)
            prev = self.tokens_seen.get(rid)
            self.tokens_seen[rid] = (st.time, st.stats.tokens_generated)
            if prev and st.time > prev[0] and is_up(rid):
                rates[role] += max(0, st.stats.tokens_generated - prev[1]) / (st.time - prev[0])
        self.log.sample(devices, rates, **extra)
