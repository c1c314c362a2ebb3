"""What the controller writes about the run (a mixin of `pivot.runtime.controller.Controller`):
one metrics row per training step (training, timing, devices per role, the flow's counters, the
engines' prefill and KV-migration counters, rejected frames, replica version repairs) and the
monitor's timeline sample of devices and tokens/s per role."""

from __future__ import annotations

import time
from typing import Any

from pivot.engine.sequence import REFUSALS


class ControllerReports:
    """Needs the controller's stats, flow, log, progress, shift executor and counters."""

    stats: dict[int, Any]
    tok_hist: dict[int, tuple[float, int]]
    flow: Any
    log: Any
    progress: Any
    shifts: Any
    ep: Any
    versions: Any
    batch_summary: dict[str, float]
    version: int
    num_shifts: int
    step: int
    _step_t0: float
    # and, from ClusterHost, role_of(rid) and is_up(rid)

    def report_step(self, step: int, train_metrics: dict[str, float], train_s: float) -> None:
        now = time.monotonic()
        devices = self.shifts.states.devices_per_role()
        metrics = {
            **{f"train/{k}": v for k, v in train_metrics.items()},
            "time/step_s": now - self._step_t0,
            "time/train_s": train_s,
            "policy_version": self.version,
            "shifts": self.num_shifts,
            **{f"devices/{k}": v for k, v in devices.items()},
            **self.batch_summary,
            **self.flow.metrics(),
            **self.kv_metrics(),
            "count/rejected_frames": self.ep.rejected,
            "count/mixed_versions": self.versions.mixed,
            "count/caught_up": self.versions.caught_up,
        }
        self._step_t0 = now
        self.log.step(step, metrics)
        self.progress.update(step + 1, metrics, devices)

    def kv_metrics(self) -> dict[str, int]:
        """Prefill and KV migration counters summed over the replicas' engines (cumulative)."""
        st = [s.stats for s in self.stats.values()]
        return {
            "count/prefill_tokens": sum(s.prefill_tokens for s in st),
            "count/reprefill_tokens": sum(s.reprefill_tokens for s in st),
            "count/kv_imported": sum(s.kv_imported for s in st),
            "count/kv_imported_tokens": sum(s.kv_imported_tokens for s in st),
            "count/kv_fallbacks": sum(s.kv_fallbacks for s in st),
            "count/kv_fallback_tokens": sum(s.kv_fallback_tokens for s in st),
            **{
                f"count/kv_refused_{r}": sum(getattr(s, f"kv_refused_{r}") for s in st)
                for r in REFUSALS
            },
        }

    def monitor(self) -> None:
        rates = {"rollout": 0.0, "reward": 0.0}
        for rid, st in self.stats.items():
            role = self.role_of(rid)
            prev = self.tok_hist.get(rid)
            self.tok_hist[rid] = (st.time, st.stats.tokens_generated)
            if prev and st.time > prev[0] and self.is_up(rid):
                rates[role] += max(0, st.stats.tokens_generated - prev[1]) / (st.time - prev[0])
        self.log.sample(
            self.shifts.states.devices_per_role(),
            rates,
            step=self.step,
            aborted=self.flow.stats.aborted,
            migrated=self.flow.stats.migrated,
        )
