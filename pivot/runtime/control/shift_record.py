"""`ShiftRecord`: one replica's shift in flight on the runtime, gathered from its ranks' ShiftDone."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from pivot.runtime.control import messages as m


@dataclass
class ShiftRecord:
    role: str
    slot: int
    up: bool
    start: float
    ranks: set[int]
    """Ranks whose ShiftDone has not come yet."""
    phases: dict[str, float] = field(default_factory=dict)
    """Seconds of each phase, the slowest rank's (the slot is ready when its last rank is)."""
    read_bytes: dict[int, int] = field(default_factory=dict)
    """rank -> bytes it Read from GPS."""
    remote_bytes: dict[int, int] = field(default_factory=dict)
    """rank -> bytes of those it read from another host's copy."""
    versions: dict[int, int] = field(default_factory=dict)
    """rank -> the weights version it read (shift up)."""

    def add(self, msg: m.ShiftDone) -> bool:
        """Fold one rank's report in; True once every rank has reported."""
        self.ranks.discard(msg.rank)
        for phase, secs in msg.phases.items():
            self.phases[phase] = max(self.phases.get(phase, 0.0), secs)
        self.read_bytes[msg.rank] = msg.read_bytes
        self.remote_bytes[msg.rank] = msg.remote_bytes
        self.versions[msg.rank] = msg.version
        if not self.ranks:
            self.phases["total"] = time.monotonic() - self.start
        return not self.ranks

    def event(self, last: m.ShiftDone, devices: tuple[int, ...]) -> dict:
        """The run log's shift event; `last` is the slot's last ShiftDone (version, checksum)."""
        event: dict[str, object] = {
            "event": "shift_up" if self.up else "shift_down",
            "role": self.role,
            "slot": self.slot,
            "devices": list(devices),
            "phases": self.phases,
        }
        if self.up:  # the oldest a rank read (they agree unless the replica came up mixed)
            event["version"], event["checksum"] = min(self.versions.values()), last.checksum
            event["gps_read_bytes"] = [self.read_bytes[d] for d in devices]
            event["gps_remote_bytes"] = [self.remote_bytes[d] for d in devices]
        return event
