"""The simulator's event queue: events pop in time order, ties in the order they were pushed,
so a run is deterministic."""

from __future__ import annotations

import heapq


class EventQueue:
    def __init__(self) -> None:
        self._heap: list[tuple[float, int, str, tuple]] = []
        self._pushed = 0

    def __bool__(self) -> bool:
        return bool(self._heap)

    def push(self, t: float, kind: str, payload: tuple) -> None:
        self._pushed += 1
        heapq.heappush(self._heap, (t, self._pushed, kind, payload))

    def pop(self) -> tuple[float, str, tuple]:
        t, _, kind, payload = heapq.heappop(self._heap)
        return t, kind, payload

    def pop_same(self, kind: str, t: float) -> list[tuple]:
        """Payloads of the further `kind` events due at `t` (taken off the queue)."""
        out = []
        while self._heap and self._heap[0][0] == t and self._heap[0][2] == kind:
            out.append(heapq.heappop(self._heap)[3])
        return out
