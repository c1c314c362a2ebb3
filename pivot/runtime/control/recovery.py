"""`EngineRecovery`: the controller's account of inference engines that failed inside live ranks.

A failure is a forced shift down of the replica (its sequences go back through the abort path
with their tokens and continue elsewhere) followed by a shift up of the same replica, whose
engine the worker builds anew from GPS (docs/reliability.md). This part only decides and counts:
which replicas come back, which stay out (`max_failures` within `window_s`; the cluster keeps
those in `Cluster.retired`), and how long each recovery took; `EngineFailures`
(pivot/runtime/control/engine_failures.py) sends the shifts.
Pure Python, no clock of its own.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class EngineRecovery:
    max_failures: int
    window_s: float
    failures: dict[int, list[float]] = field(default_factory=dict)
    """Replica id -> the times of its failures within the window."""
    down_for_rebuild: dict[int, float] = field(default_factory=dict)
    """Replicas shifting down because their engine failed -> when it failed."""
    coming_back: dict[int, float] = field(default_factory=dict)
    """Replicas shifting up with a new engine -> when their engine failed."""
    engine_failures: int = 0
    engines_rebuilt: int = 0
    replicas_retired: int = 0
    longest_recover_s: float | None = None
    """The most seconds from a failure to its replica serving again."""

    def failed(self, rid: int, now: float, up: bool) -> None:
        """`rid`'s engine failed at `now`; `up`: it is up (not shifting), so it is shifted down
        to be rebuilt (a replica already shifting down is rebuilt on its next shift up)."""
        self.engine_failures += 1
        recent = [t for t in self.failures.get(rid, []) if now - t < self.window_s]
        self.failures[rid] = recent + [now]
        if up:
            self.down_for_rebuild[rid] = now

    def shifted_down(self, rid: int) -> bool | None:
        """`rid` finished shifting down: None if no failure put it down, else whether it comes
        back (False: its failures within the window reached the limit; it stays out)."""
        failed_at = self.down_for_rebuild.pop(rid, None)
        if failed_at is None:
            return None
        if len(self.failures[rid]) >= self.max_failures:
            self.replicas_retired += 1
            return False
        self.coming_back[rid] = failed_at
        return True

    def shifted_up(self, rid: int, now: float) -> float | None:
        """`rid` finished shifting up: the seconds since its engine failed, if this was its rebuild."""
        failed_at = self.coming_back.pop(rid, None)
        if failed_at is None:
            return None
        self.engines_rebuilt += 1
        took = now - failed_at
        self.longest_recover_s = max(took, self.longest_recover_s or 0.0)
        return took

    def counters(self) -> dict[str, float]:
        """The metrics row's recovery counters."""
        return {
            "count/engine_failures": self.engine_failures,
            "count/engines_rebuilt": self.engines_rebuilt,
            "count/replicas_retired": self.replicas_retired,
            **(
                {"recover_s/max": self.longest_recover_s}
                if self.longest_recover_s is not None
                else {}
            ),
        }
