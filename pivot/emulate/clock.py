"""The emulated device's clock: a unit of work (an engine step, a training step, a shift) is
given the device time the hardware profile predicts for the paper-scale model, and the rank
waits until that time, scaled by `time_scale`, has passed since the work began. The real tiny
model's compute is inside that window: it is not added, it is waited out, so many ranks on
few cores behave as independent devices as long as compute stays a small part of each window.

    deadline = t0 + emulated_s * time_scale;  sleep(max(0, deadline - now))

What was computed, waited and overrun (compute past the deadline, which slows the emulated
device) is kept per kind of work, in emulated seconds and in wall seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class WorkTally:
    count: int = 0
    emulated_s: float = 0.0
    """Device time the profile gave this work (emulated seconds)."""
    device_s: float = 0.0
    """Emulated seconds times the devices doing the work (device-seconds)."""
    compute_s: float = 0.0
    """Wall seconds of real compute inside the windows."""
    waited_s: float = 0.0
    """Wall seconds slept to reach the deadlines."""
    overrun_s: float = 0.0
    """Wall seconds by which compute passed a deadline."""
    prefill_tokens: int = 0
    """Real tokens an engine prefilled (inference work; re-prefills included)."""
    prefix_hit_tokens: int = 0
    """Real prompt tokens an engine reused from a shared prefix instead of prefilling."""
    reprefill_tokens: int = 0
    """Of the prefilled tokens, those computed again (resumed without their KV, or preempted)."""
    kv_imported_tokens: int = 0
    """Real tokens whose KV came with a migrated sequence instead of being re-prefilled."""
    kv_fallback_tokens: int = 0
    """Real tokens of migrated KV a replica could not take (re-prefilled instead)."""


@dataclass
class EmulatedClock:
    time_scale: float
    """Wall seconds per emulated second."""
    now: Callable[[], float] = time.perf_counter
    sleep: Callable[[float], None] = time.sleep
    tally: dict[str, WorkTally] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.time_scale > 0:
            raise ValueError(f"emulate.time_scale={self.time_scale!r}: must be > 0")

    def deadline(self, t0: float, emulated_s: float) -> float:
        return t0 + emulated_s * self.time_scale

    def wait(self, kind: str, t0: float, emulated_s: float, devices: int = 1) -> float:
        """Wait until `emulated_s` of device time has passed since wall time `t0` (the work has
        been done in between); returns the wall seconds slept."""
        t = self.tally.setdefault(kind, WorkTally())
        now = self.now()
        remaining = self.deadline(t0, emulated_s) - now
        t.count += 1
        t.emulated_s += emulated_s
        t.device_s += emulated_s * devices
        t.compute_s += now - t0
        if remaining > 0:
            self.sleep(remaining)
            t.waited_s += remaining
        else:
            t.overrun_s -= remaining
        return max(remaining, 0.0)
