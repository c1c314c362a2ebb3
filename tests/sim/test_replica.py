"""The closed-form simulated replica against a step-by-step engine written here from the rules of
pivot/engine/scheduler.py: FIFO admission under a running-sequence cap and a KV limit, preemption
of the newest arrival when the running KV outgrows the cache, recompute on readmission."""

from __future__ import annotations

import pytest

from pivot.sched import ThroughputModel
from pivot.sim.replica import SimReplica

M = ThroughputModel(A=1e-6, B=0.01, C=0.002, D=0.003)


def _brute_force(
    seqs: dict[int, tuple[int, int]], max_running: int, cap: int, limit: int
) -> tuple[dict[int, float], int]:
    """Finish time of each sequence (id -> (prompt, target)) decoding one step at a time."""
    waiting = list(seqs)  # arrival order == id order here
    running: list[int] = []
    gen = dict.fromkeys(seqs, 0)
    t, done, preempted = 0.0, {}, 0

    def length(s: int) -> int:
        return seqs[s][0] + gen[s]

    while waiting or running:
        while len(running) > 1 and sum(map(length, running)) + len(running) > cap:
            newest = max(running)
            running.remove(newest)
            waiting.insert(0, newest)
            preempted += 1
        while (
            waiting
            and len(running) < max_running
            and (
                not running
                or sum(map(length, running)) + length(waiting[0]) + len(running) + 1 <= limit
            )
        ):
            running.append(waiting.pop(0))
        tok = sum(map(length, running))
        t += M.latency(len(running), tok)
        for s in list(running):
            gen[s] += 1
            if gen[s] == seqs[s][1]:
                done[s] = t
                running.remove(s)
    return done, preempted


def _closed_form(
    seqs: dict[int, tuple[int, int]], max_running: int, cap: int, headroom: float
) -> tuple[dict[int, float], int]:
    rep = SimReplica(0, M, cap, prefill_per_tok=0.0, max_running=max_running, headroom=headroom)
    for sid, (prompt, target) in seqs.items():
        rep.add(sid, prompt, 0, target, 0.0)
    got = {}
    while rep.n:
        assert rep.n <= max_running and (rep.n == 1 or rep.tok <= cap)
        t_ev = rep.next_event()
        rep.advance(t_ev)
        for s in rep.finished():
            got[s] = t_ev
    assert not rep.waiting
    return got, rep.preemptions


SEQS = {1: (30, 30), 2: (30, 30), 3: (30, 12), 4: (10, 8), 5: (20, 25)}  # id -> (prompt, response)


@pytest.mark.parametrize(
    "max_running,cap,headroom",
    [
        (1 << 30, 10**6, 0.0),
        (2, 10**6, 0.0),
        (3, 100, 0.0),
        (3, 100, 0.2),
        (8, 120, 0.0),
        (8, 120, 0.3),
    ],
)
def test_replica_matches_step_by_step_engine(max_running: int, cap: int, headroom: float) -> None:
    want, want_preempted = _brute_force(SEQS, max_running, cap, int(cap * (1 - headroom)))
    got, preempted = _closed_form(SEQS, max_running, cap, headroom)
    assert got.keys() == want.keys()
    for s in want:
        assert got[s] == pytest.approx(want[s]), s
    assert preempted == want_preempted


def test_headroom_cuts_preemptions() -> None:
    assert _closed_form(SEQS, 3, 100, 0.0)[1] > _closed_form(SEQS, 3, 100, 0.2)[1]
    assert _closed_form(SEQS, 8, 120, 0.0)[1] > _closed_form(SEQS, 8, 120, 0.3)[1] == 0


def test_max_running_caps_the_batch() -> None:
    rep = SimReplica(0, M, 10**6, prefill_per_tok=0.0, max_running=4)
    for sid in range(10):
        rep.add(sid, 10, 0, 5, 0.0)
    assert rep.n == 4 and len(rep.waiting) == 6 and rep.tok == 40
    assert rep.generated(9) == 0 and rep.remove(9) == 0 and len(rep.waiting) == 5


def test_an_abort_admits_what_now_fits() -> None:
    """The running sequences aborted (the scheduler moved them) while others wait for a slot: the
    waiting ones start at once, as the engine's next step admits them; the replica does not sit
    idle with work waiting (it once did, until the simulation ran out of time)."""
    rep = SimReplica(0, M, 10**6, prefill_per_tok=0.0, max_running=2)
    for sid in range(4):
        rep.add(sid, 10, 0, 5, 0.0)
    assert rep.n == 2 and list(rep.waiting) == [2, 3]
    assert rep.abort(0) == 0 and rep.abort(1) == 0
    assert sorted(rep.seqs) == [2, 3] and not rep.waiting and rep.next_event() is not None


def test_admission_and_readmission_pay_the_prefill() -> None:
    rep = SimReplica(0, M, 100, prefill_per_tok=1.0, max_running=8)
    rep.add(1, 30, 0, 30, 0.0)
    rep.add(2, 30, 0, 5, 0.0)
    rep.add(3, 30, 0, 12, 0.0)
    assert rep.prefilled == 90 and rep.clock == pytest.approx(90.0)
    while not rep.preemptions:
        rep.advance(rep.next_event())
        rep.finished()
    assert rep.tok + rep.n <= rep.cap and list(rep.waiting) == [3]  # the newest arrival waits
    gen = rep.generated(3)
    assert gen > 0
    while 3 in rep.waiting:
        rep.advance(rep.next_event())
        rep.finished()
    assert (
        rep.preemptions == 1 and rep.prefilled == 90 + 30 + gen
    )  # prompt and generated tokens recomputed


def _prefill_of(
    rep: SimReplica, sid: int, prompt: int, prefixes: tuple, generated: int = 0
) -> float:
    """Seconds the replica stalls to admit one more sequence."""
    before = rep.clock
    rep.add(sid, prompt, generated, 100, rep.clock, prefixes)
    return rep.clock - before


def test_a_prefix_held_by_a_running_sequence_is_prefilled_once() -> None:
    rep = SimReplica(0, M, cap=10_000, prefill_per_tok=1.0)
    group = ((("common",), 10), (("group", 0), 300))
    assert _prefill_of(rep, 1, 300, group) == 300  # nothing to share yet
    assert _prefill_of(rep, 2, 300, group) == 1  # its last token is always computed
    other = ((("common",), 10), (("group", 1), 250))
    assert _prefill_of(rep, 3, 250, other) == 240  # only the common head is held
    assert _prefill_of(rep, 4, 300, group, generated=50) == 50  # a re-prefill shares the prompt
    assert (rep.prefilled, rep.prefix_hits) == (300 + 1 + 240 + 50, 299 + 10 + 300)


def test_a_prefix_is_not_shared_across_replicas_nor_after_its_holders_leave() -> None:
    a, b = (SimReplica(i, M, cap=10_000, prefill_per_tok=1.0) for i in range(2))
    group = ((("group", 0), 300),)
    assert _prefill_of(a, 1, 300, group) == 300
    assert _prefill_of(b, 2, 300, group) == 300  # another replica computes it again
    a.remove(1)
    assert _prefill_of(a, 3, 300, group) == 300  # its only holder left
