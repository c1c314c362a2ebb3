"""Which policy version each rollout replica serves, from its ranks' own reports.

Every rank of a replica reads the version it is told (`ShiftUp.version`, `UpdateWeights.version`);
if GPS no longer holds it (two newer Writes landed while the rank waited) the rank reads the
newest and says so. A replica is then **mixed**: its ranks hold shards of different versions.
That is an error the run recovers from, counted (`count/mixed_versions`) and logged: the replica
is told to update, every rank to the same, newest version. A replica that comes up behind the
newest policy (a training step finished while it shifted up, so the update went only to the
replicas already up) is told to catch up the same way (`count/caught_up`). Pure bookkeeping.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)


class ReplicaVersions:
    def __init__(self) -> None:
        self.of: dict[int, int] = {}
        """rid -> the version its ranks reported (the oldest, when they disagree)."""
        self.mixed = 0
        """Shift-ups and updates after which a replica's ranks held different versions."""
        self.caught_up = 0
        """Replicas that came up behind the newest policy and were told to update."""
        self._acks: dict[int, dict[int, int]] = {}  # rid -> rank -> version, of an update in flight

    def get(self, rid: int, default: int) -> int:
        return self.of.get(rid, default)

    def report(self, rid: int, version: int) -> None:
        """The replica's leader says which version it serves (its engine's stats)."""
        self.of[rid] = version

    def shifted_up(self, rid: int, by_rank: dict[int, int], latest: int, what: str) -> bool:
        """A replica is up with `by_rank` (rank -> version it read); True when it must be told
        to update to `latest` (it is mixed, or behind)."""
        return self._settle(rid, by_rank, latest, what)

    def updated(
        self, rid: int, rank: int, version: int, ranks: tuple[int, ...], latest: int, what: str
    ) -> bool:
        """One rank's WeightsUpdated; True once every rank of `ranks` has answered and the
        replica must be told to update again (mixed, or behind `latest`)."""
        acks = self._acks.setdefault(rid, {})
        acks[rank] = version
        if set(acks) < set(ranks):
            return False
        del self._acks[rid]
        return self._settle(rid, acks, latest, what)

    def _settle(self, rid: int, by_rank: dict[int, int], latest: int, what: str) -> bool:
        versions = set(by_rank.values())
        self.of[rid] = min(versions)
        if len(versions) > 1:
            self.mixed += 1
            log.warning(
                "%s: its ranks read different policy versions %s (rank: version); updating every rank to %d",
                what,
                dict(sorted(by_rank.items())),
                latest,
            )
            return True
        if min(versions) < latest:
            self.caught_up += 1
            return True
        return False
