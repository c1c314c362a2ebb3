"""One simulated inference replica: continuous-batching decode at the throughput model's speed.

Each decode step every running sequence gains one token and the step takes
`A * n_tok + max(B, C * n_seq) + D` seconds (the scheduler's own model, so the planner's
estimate and the simulated speed agree, as they would after a good profile fit). Between two
changes of the running set, n_tok grows by n_seq per step, so the time of k steps has a closed
form and the replica is advanced in O(1), not step by step:

    t(k) = k * (A * n_tok + max(B, C * n) + D) + A * n * k * (k - 1) / 2

A sequence stores the replica step at which it joined and its generated count then; its
progress is read off the step counter. Joining costs a prefill of its whole length (prompt
plus tokens generated before an abort: re-prefill), paid as a stall of the replica.
"""
from __future__ import annotations

import heapq
import math

from pivot.sched import ThroughputModel


class SimReplica:
    __slots__ = ("rid", "m", "cap", "steps", "clock", "tok", "seqs", "_finish", "ver", "prefill_per_tok")

    def __init__(self, rid: int, model: ThroughputModel, cap: int, prefill_per_tok: float) -> None:
        self.rid, self.m, self.cap, self.prefill_per_tok = rid, model, cap, prefill_per_tok
        self.steps = 0
        self.clock = 0.0  # end of the last completed step (or of a prefill stall)
        self.tok = 0
        self.seqs: dict[int, tuple[int, int, int, int]] = {}  # sid -> (joined step, generated then, prompt, ver)
        self._finish: list[tuple[int, int, int]] = []  # (step at which it finishes, sid, ver), lazy deletion
        self.ver = 0

    @property
    def n(self) -> int:
        return len(self.seqs)

    def generated(self, sid: int) -> int:
        s0, g0, _, _ = self.seqs[sid]
        return g0 + self.steps - s0

    def _step_time(self, k: int) -> float:
        n, m = len(self.seqs), self.m
        return k * (m.A * self.tok + max(m.B, m.C * n) + m.D) + m.A * n * k * (k - 1) / 2

    def advance(self, now: float) -> None:
        """Run every whole step that ends by `now`."""
        n = len(self.seqs)
        if n == 0:
            self.clock = max(self.clock, now)
            return
        dt = now - self.clock
        if dt <= 0:
            return
        m = self.m
        a, b = m.A * n / 2, m.A * self.tok + max(m.B, m.C * n) + m.D - m.A * n / 2  # t(k) = a k^2 + b k
        k = int((-b + math.sqrt(b * b + 4 * a * dt)) / (2 * a)) if a > 0 else int(dt / b)
        cap_k = self._next_finish_steps()
        k = min(k, cap_k)
        while k > 0 and self._step_time(k) > dt + 1e-9:
            k -= 1
        while k < cap_k and self._step_time(k + 1) <= dt + 1e-9:  # float error of the root
            k += 1
        if k > 0:
            self.clock += self._step_time(k)
            self.steps += k
            self.tok += n * k

    def _live(self, entry: tuple[int, int, int]) -> bool:
        s = self.seqs.get(entry[1])
        return s is not None and s[3] == entry[2]

    def _next_finish_steps(self) -> int:
        f = self._finish
        while f and not self._live(f[0]):
            heapq.heappop(f)
        return f[0][0] - self.steps if f else 1 << 40

    def next_event(self) -> float | None:
        """When the next sequence finishes or the KV cache would overflow; None when idle."""
        n = len(self.seqs)
        if n == 0:
            return None
        k = self._next_finish_steps()
        room = (self.cap - self.tok) // n
        k = max(1, min(k, room))
        return self.clock + self._step_time(k)

    def finished(self) -> list[int]:
        """Sequences that reached their target, removed from the replica, ascending id."""
        out = []
        f = self._finish
        while f and (not self._live(f[0]) or f[0][0] <= self.steps):
            entry = heapq.heappop(f)
            if self._live(entry):
                out.append(entry[1])
        for sid in out:
            self.remove(sid)
        return sorted(out)

    def overflowing(self) -> bool:
        return self.tok + len(self.seqs) > self.cap

    def add(self, sid: int, prompt_len: int, generated: int, target: int, now: float) -> None:
        if not self.seqs:
            self.clock = max(self.clock, now)
        length = prompt_len + generated
        self.ver += 1
        self.seqs[sid] = (self.steps, generated, prompt_len, self.ver)
        self.tok += length
        heapq.heappush(self._finish, (self.steps + max(target - generated, 0), sid, self.ver))
        self.clock += self.prefill_per_tok * length

    def remove(self, sid: int) -> int:
        """Take a sequence off; returns its generated count."""
        gen = self.generated(sid)
        _, _, p, _ = self.seqs.pop(sid)
        self.tok -= p + gen
        self.ver += 1
        return gen
