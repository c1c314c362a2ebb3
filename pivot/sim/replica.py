"""One simulated inference replica: continuous-batching decode at the throughput model's speed,
with the real engine's admission and preemption (pivot/engine/scheduler.py).

Dispatched sequences wait in the replica in arrival order; a waiting sequence is admitted
(starts running) while fewer than `max_running` run and the running KV after admitting it
and one more decode step stays within `(1 - headroom) * cap`: the room above is left for the running sequences to grow
into, as a serving engine reserves decode room when it admits (sglang's new-token ratio, vLLM's
watermark). When the running KV would still outgrow `cap`, the newest running sequence is
preempted back to the front of the waiting list with its tokens (recomputed on readmission).
Preemption stays inside the replica, as in the engine: the shift-aware scheduler still sees the
sequence there. At least one sequence always runs, so a replica never stalls.

Each decode step every running sequence gains one token and the step takes
`ThroughputModel.latency(n_seq, n_tok)` seconds (pivot/sched/throughput.py, the scheduler's own
model, so the planner's estimate and the simulated speed agree, as they would after a good
profile fit). Between two
changes of the running set, n_tok grows by n_seq per step, so the time of k steps has a closed
form and the replica is advanced in O(1), not step by step:

    t(k) = k * (A * n_tok + max(B, C * n) + D) + A * n * k * (k - 1) / 2

A running sequence stores the replica step at which it started and its generated count then;
its progress is read off the step counter. Starting costs a prefill of its whole length (prompt
plus tokens generated before an abort or preemption: re-prefill), paid as a stall of the replica,
less the longest shared prefix (`prefixes`: (key, tokens) pairs, such as a GRPO group's prompt)
that a sequence running on this replica already holds: the engine computes a shared prefix once
(radix cache, keyed blocks). Its last token is always computed. KV is still counted per sequence
(as the shift-aware scheduler counts it), and a prefix held only by finished sequences is not
reused (under load, an engine evicts those blocks first).

An agentic episode's turn that ends for a tool call leaves the replica (its decode slot and its
KV count free) and its context stays *parked* (`park`): cached blocks no running sequence holds,
not counted against the KV the admission checks, evicted oldest first once the running KV and
the parked contexts together exceed `cap` (checked at each admission and each park), and all
dropped when the replica shifts down (`drop_parked`: its KV is discarded). The episode's next
turn, dispatched by the scheduler wherever it places it, prefills only what its parked context
does not cover (the tool's response) if it lands on this replica while its context is still
parked (`resume`), else its whole context, as an engine with prefix caching does.
"""

from __future__ import annotations

import heapq
import math

from pivot.sched import ThroughputModel
from pivot.sim.hardware import decode_steps_s


class SimReplica:
    __slots__ = (
        "rid",
        "m",
        "cap",
        "limit",
        "max_running",
        "steps",
        "clock",
        "tok",
        "seqs",
        "waiting",
        "_finish",
        "ver",
        "prefill_per_tok",
        "prefilled",
        "prefix_hits",
        "preemptions",
        "busy_s",
        "_arrivals",
        "_prefixes",
        "_holders",
        "kv_per_tok",
        "kv_moved",
        "reprefilled",
        "_kept",
        "_parked",
        "parked_tok",
        "_resume",
        "resumes",
        "resume_hits",
        "context_hits",
    )

    def __init__(
        self,
        rid: int,
        model: ThroughputModel,
        cap: int,
        prefill_per_tok: float,
        max_running: int = 1 << 30,
        headroom: float = 0.0,
        kv_per_tok: float | None = None,
    ) -> None:
        """`kv_per_tok`: seconds per token to take in a migrated sequence's KV instead of
        re-prefilling it (KV-preserving migration, pivot/sim/kv_move.py); None: re-prefill."""
        if max_running < 1 or not 0.0 <= headroom < 1.0:
            raise ValueError(
                f"SimReplica {rid}: need max_running >= 1 and 0 <= headroom < 1, got {max_running}, {headroom}"
            )
        self.rid, self.m, self.cap, self.prefill_per_tok = rid, model, cap, prefill_per_tok
        self.limit = int(cap * (1.0 - headroom))  # running KV allowed at admission
        self.max_running = max_running
        self.steps = 0
        self.clock = 0.0  # end of the last completed step (or of a prefill stall)
        self.tok = 0  # KV of the running sequences
        # running: sid -> (step it started, generated then, prompt, ver, target, arrival)
        self.seqs: dict[int, tuple[int, int, int, int, int, int]] = {}
        self.waiting: dict[
            int, tuple[int, int, int, int]
        ] = {}  # in admission order: sid -> (prompt, generated, target, arrival)
        self._arrivals = 0
        self._finish: list[
            tuple[int, int, int]
        ] = []  # (step at which it finishes, sid, ver), lazy deletion
        self.ver = 0
        self.prefilled = 0  # tokens prefilled (first prefills and re-prefills)
        self.prefix_hits = 0  # tokens of shared prefixes reused instead of prefilled
        self._prefixes: dict[
            int, tuple[tuple[object, int], ...]
        ] = {}  # waiting and running: sid -> its prefixes
        self._holders: dict[object, int] = {}  # prefix key -> running sequences holding it
        self.preemptions = 0
        self.busy_s = 0.0  # seconds spent in decode steps and prefills
        self.kv_per_tok = kv_per_tok
        self.kv_moved = 0  # tokens whose KV arrived with a migrated sequence
        self.reprefilled = 0  # of `prefilled`, tokens of resumed sequences computed again
        self._kept: dict[int, int] = {}  # waiting: sid -> tokens of KV it brought
        # episode key -> tokens of its parked context, oldest first
        self._parked: dict[object, int] = {}
        self.parked_tok = 0
        self._resume: dict[int, tuple[object, int]] = {}  # waiting: sid -> (episode key, tokens)
        self.resumes = 0  # turns admitted after a tool call
        self.resume_hits = 0  # of them, those whose context was still parked here
        self.context_hits = 0  # tokens of parked contexts reused instead of prefilled

    @property
    def n(self) -> int:
        """Running sequences."""
        return len(self.seqs)

    def progress(self) -> list[tuple[int, int]]:
        """(id, generated) of every running sequence, in admission order."""
        steps = self.steps
        return [(sid, g0 + steps - s0) for sid, (s0, g0, *_) in self.seqs.items()]

    def generated(self, sid: int) -> int:
        if sid in self.waiting:
            return self.waiting[sid][1]
        s0, g0 = self.seqs[sid][:2]
        return g0 + self.steps - s0

    def _step_time(self, k: int) -> float:
        m = self.m
        return decode_steps_s(m.A, m.B, m.C, m.D, len(self.seqs), self.tok, k)

    def advance(self, now: float) -> None:
        """Run every whole step that ends by `now`."""
        n = len(self.seqs)
        if n == 0:
            self.clock = max(self.clock, now)
            return
        dt = now - self.clock
        if dt <= 0:
            return
        a = self.m.A * n / 2
        b = self.m.latency(n, self.tok) - a  # t(k) = a k^2 + b k
        k = int((-b + math.sqrt(b * b + 4 * a * dt)) / (2 * a)) if a > 0 else int(dt / b)
        cap_k = min(self._next_finish_steps(), self._room_steps())
        k = min(k, cap_k)
        while k > 0 and self._step_time(k) > dt + 1e-9:
            k -= 1
        while k < cap_k and self._step_time(k + 1) <= dt + 1e-9:  # float error of the root
            k += 1
        if k > 0:
            dt_k = self._step_time(k)
            self.clock += dt_k
            self.busy_s += dt_k
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

    def _room_steps(self) -> int:
        """Steps the running sequences can take before their KV outgrows `cap` (a lone sequence
        is never preempted, so it is not bounded)."""
        n = len(self.seqs)
        return max(1, (self.cap - self.tok) // n) if n > 1 else 1 << 40

    def next_event(self) -> float | None:
        """When the next sequence finishes or the KV cache would overflow; None when idle."""
        if not self.seqs:
            return None
        return self.clock + self._step_time(
            max(1, min(self._next_finish_steps(), self._room_steps()))
        )

    def finished(self) -> list[int]:
        """Sequences that reached their target, removed from the replica, ascending id; then
        preempts on KV overflow and admits waiting sequences (the engine's next schedule)."""
        out = []
        f = self._finish
        while f and (not self._live(f[0]) or f[0][0] <= self.steps):
            entry = heapq.heappop(f)
            if self._live(entry):
                out.append(entry[1])
        for sid in out:
            self.remove(sid)
        self._preempt()
        self._admit()
        return sorted(out)

    def add(
        self,
        sid: int,
        prompt_len: int,
        generated: int,
        target: int,
        now: float,
        prefixes: tuple[tuple[object, int], ...] = (),
        kept: int = 0,
        resume: tuple[object, int] | None = None,
    ) -> None:
        """A dispatched sequence joins the waiting list (call `advance(now)` first); `prefixes`:
        the (key, tokens) prefixes of its prompt that other sequences share; `kept`: tokens of
        KV it brings from the replica it was aborted on (with `kv_per_tok`); `resume`: (episode
        key, tokens) of the context its episode's previous turn left (`park`), here or elsewhere:
        what it does not find parked here is computed again."""
        if kept and self.kv_per_tok is not None:
            self._kept[sid] = min(kept, prompt_len + generated - 1)
        if resume is not None:
            self._resume[sid] = resume
        if not self.seqs:
            self.clock = max(self.clock, now)
        self._arrivals += 1
        self.waiting[sid] = (prompt_len, generated, target, self._arrivals)
        self._prefixes[sid] = prefixes
        self.ver += 1
        self._admit()

    def kv_held(self, sid: int) -> int:
        """Tokens of `sid`'s KV this replica holds: all it computed if running, what it brought
        if waiting with migrated KV, else 0 (an abort exports that much with KV migration on)."""
        if sid in self.waiting:
            return self._kept.get(sid, 0)
        return self.seqs[sid][2] + self.generated(sid) - 1

    def remove(self, sid: int) -> int:
        """Take a sequence off (running or waiting); returns its generated count."""
        self.ver += 1
        self._kept.pop(sid, None)
        self._resume.pop(sid, None)
        prefixes = self._prefixes.pop(sid)
        if sid in self.waiting:
            return self.waiting.pop(sid)[1]
        gen = self.generated(sid)
        p = self.seqs.pop(sid)[2]
        for key, _ in prefixes:  # a key no running sequence holds is dropped: groups come and go
            if self._holders[key] == 1:
                del self._holders[key]
            else:
                self._holders[key] -= 1
        self.tok -= p + gen
        return gen

    def abort(self, sid: int) -> int:
        """Take a sequence off as the scheduler's abort does (returns its generated count), then
        admit the waiting sequences the freed slot and KV now fit: the engine's next step would,
        and a replica whose last running sequence left would otherwise never step again."""
        gen = self.remove(sid)
        self._admit()
        return gen

    def _admit(self) -> None:
        self._admit_waiting()
        if self._parked:
            self._evict()  # the running KV grew

    def _admit_waiting(self) -> None:
        while self.waiting and len(self.seqs) < self.max_running:
            if self._parked:
                self._evict()  # before a turn looks for its context
            sid = next(iter(self.waiting))
            prompt, gen, target, arrival = self.waiting[sid]
            length = prompt + gen
            if (
                self.seqs and self.tok + length + len(self.seqs) + 1 > self.limit
            ):  # room for one more step
                return  # the head waits, and the rest behind it (arrival order)
            del self.waiting[sid]
            self.ver += 1
            self.seqs[sid] = (self.steps, gen, prompt, self.ver, target, arrival)
            self.tok += length
            heapq.heappush(self._finish, (self.steps + max(target - gen, 0), sid, self.ver))
            shared = 0
            for key, tokens in self._prefixes[sid]:
                if self._holders.get(key, 0) > 0:
                    shared = max(shared, min(tokens, length - 1))
                self._holders[key] = self._holders.get(key, 0) + 1
            resume = self._resume.pop(sid, None)
            again = 0  # an earlier turn's context computed again (its episode's turn landed here)
            if resume is not None:  # an episode's next turn: is its context still parked here?
                parked = self._parked.pop(resume[0], 0)
                self.parked_tok -= parked
                self.resumes += 1
                if parked:
                    hit = min(parked, resume[1], length - 1)
                    self.resume_hits += 1
                    self.context_hits += max(hit - shared, 0)
                    shared = max(shared, hit)
                again = max(min(resume[1], length - 1) - shared, 0)  # the rest is the tool's
            kept = self._kept.pop(sid, 0)
            if kept:  # its KV came along: only what it had not computed yet is prefilled
                fresh = max(length - kept - 1, 0)  # the last token is the next decode step
                moved_s = self.kv_per_tok * kept + self.prefill_per_tok * fresh  # type: ignore[operator]
                self.clock += moved_s
                self.busy_s += moved_s
                self.prefilled += fresh
                self.kv_moved += kept
                continue
            self.clock += self.prefill_per_tok * (length - shared)
            self.busy_s += self.prefill_per_tok * (length - shared)
            self.prefilled += length - shared
            self.reprefilled += (length - shared) * (gen > 0) + again
            self.prefix_hits += shared

    def park(self, key: object, tokens: int) -> None:
        """An episode's turn left for a tool call: its context (`tokens`) stays cached under
        `key` until evicted, dropped, or reused by the episode's next turn (see the module
        docstring)."""
        self.parked_tok -= self._parked.pop(key, 0)
        self._parked[key] = tokens
        self.parked_tok += tokens
        self._evict()

    def drop_parked(self) -> None:
        """The replica shifts down: its cached contexts go with its KV."""
        self._parked.clear()
        self.parked_tok = 0

    def _evict(self) -> None:
        """Oldest parked contexts out while they and the running KV exceed `cap`."""
        while self._parked and self.tok + self.parked_tok > self.cap:
            self.parked_tok -= self._parked.pop(next(iter(self._parked)))

    def _preempt(self) -> None:
        while len(self.seqs) > 1 and self.tok + len(self.seqs) > self.cap:
            sid = max(self.seqs, key=lambda s: self.seqs[s][5])  # the newest arrival
            _, _, prompt, _, target, arrival = self.seqs[sid]
            prefixes = self._prefixes[sid]
            gen = self.remove(sid)
            self.waiting = {
                sid: (prompt, gen, target, arrival),
                **self.waiting,
            }  # first to be readmitted
            self._prefixes[sid] = prefixes
            self.preemptions += 1
