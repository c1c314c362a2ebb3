"""TailLaneScheduler: once the oldest step has few sequences left, they hold lanes of their own."""

from __future__ import annotations

import pytest

from pivot.sched import Replica, SeqState, ShiftAwareScheduler, ThroughputModel
from pivot.sched.records import step_major_id
from pivot.sched.tail_lane import TailLaneScheduler

M = ThroughputModel(A=2e-6, B=0.012, C=1.5e-4, D=0.004)


def reps(n: int, cap: int = 10_000) -> list[Replica]:
    return [Replica(i, "reward", (i,), cap, M) for i in range(n)]


def test_no_tail_dispatches_as_the_plain_scheduler() -> None:
    lane, plain = TailLaneScheduler(reps(4), tail_seqs=2), ShiftAwareScheduler(reps(4))
    for k in range(12):  # step 0 has 12 sequences: more than 2, no lane
        for s in (lane, plain):
            s.submit(SeqState(step_major_id(0, k), 100 + 10 * k))
    assert lane.dispatch() == plain.dispatch()
    assert lane.lanes == []


def test_tail_sequences_get_lanes_and_nothing_else_runs_there() -> None:
    s = TailLaneScheduler(reps(4), tail_seqs=3, lane_share=0.5)
    old = [step_major_id(5, k) for k in range(3)]
    young = [step_major_id(6, k) for k in range(3, 15)]
    for sid in old + young:
        s.submit(SeqState(sid, 200))
    s.dispatch()
    # 3 tail sequences of 200 tokens fit one lane (full KV budget); at most half of 4 are lanes
    assert len(s.lanes) == 1
    on_lane = {q.seq_id for rid in s.lanes for q in s.running(rid)}
    assert on_lane == set(old)
    elsewhere = {q.seq_id for rid in set(range(4)) - set(s.lanes) for q in s.running(rid)}
    assert elsewhere == set(young)
    # a KV budget of 5% (500 tokens): 600 tokens need 2 lanes
    s2 = TailLaneScheduler(reps(4), tail_seqs=3, lane_share=0.5, lane_kv_share=0.05)
    for sid in old + young:
        s2.submit(SeqState(sid, 200))
    s2.dispatch()
    assert len(s2.lanes) == 2
    assert {q.seq_id for rid in s2.lanes for q in s2.running(rid)} == set(old)


def test_lanes_close_when_the_tail_step_is_done() -> None:
    s = TailLaneScheduler(reps(3), tail_seqs=1, lane_share=0.5)
    tail, young = step_major_id(0, 0), [step_major_id(1, k) for k in range(1, 7)]
    for sid in [tail, *young]:
        s.submit(SeqState(sid, 100))
    s.dispatch()
    assert [q.seq_id for q in s.running(s.lanes[0])] == [tail]
    s.on_finish(tail)  # step 1 (6 left) is now the oldest: more than tail_seqs, no lane
    s.dispatch()
    assert s.lanes == []


def test_bad_parameters_are_named() -> None:
    with pytest.raises(ValueError, match="tail_seqs"):
        TailLaneScheduler(reps(2), tail_seqs=0)
    with pytest.raises(ValueError, match="lane_share"):
        TailLaneScheduler(reps(2), lane_share=1.0)
