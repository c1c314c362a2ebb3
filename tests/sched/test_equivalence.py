"""The production scheduler returns exactly what the paper oracle (reference_scheduler.py) does:
the same commands and the same state after every call of a random series."""

from __future__ import annotations

import random

import pytest

from pivot.sched import Replica, SeqState, ShiftAwareScheduler, ThroughputModel
from tests.sched import reference_scheduler as ref

MODELS = [
    ThroughputModel(A=2e-6, B=0.012, C=1.5e-4, D=0.004),
    ThroughputModel(A=1e-6, B=0.010, C=2e-4, D=0.005),
    ThroughputModel(A=0.0, B=0.02, C=0.0, D=0.0),  # dT independent of load: many exact ties
]


def state(s: object) -> tuple:
    ids = s.replica_ids  # type: ignore[attr-defined]
    return (
        [q.seq_id for q in s.queued()],  # type: ignore[attr-defined]
        [(rid, [q.seq_id for q in s.running(rid)], s.replica_throughput(rid)) for rid in ids],  # type: ignore[attr-defined]
        s.active_ids,  # type: ignore[attr-defined]
        s.throughput(),  # type: ignore[attr-defined]
    )


@pytest.mark.parametrize("seed", range(40))
def test_random_operation_series_match_reference(seed: int) -> None:
    rng = random.Random(seed)
    n = rng.randint(1, 7)
    specs = [
        Replica(i, "rollout", (i,), rng.choice([500, 800, 3000]), rng.choice(MODELS))
        for i in range(n)
    ]
    active = [i for i in range(n) if rng.random() < 0.5] or [0]
    fast = ShiftAwareScheduler(specs, active=active)
    slow = ref.ShiftAwareScheduler(specs, active=active)
    sid = 0
    for _ in range(60):
        op = rng.choice(
            ["submit", "submit", "dispatch", "abort", "progress", "finish", "up", "down", "clone"]
        )
        if op == "submit":
            seq = SeqState(sid, rng.randint(1, 400), rng.randint(0, 50))
            sid += 1
            fast.submit(seq)
            slow.submit(seq)
            continue
        if op == "clone":  # continue on copies: the originals must not be shared
            fast, slow = fast.clone(), slow.clone()
            continue
        known = sorted(q.seq_id for q in slow.queued()) + sorted(
            q.seq_id for rid in slow.replica_ids for q in slow.running(rid)
        )
        off = [r for r in slow.replica_ids if r not in slow.active_ids]
        if op == "dispatch":
            got, want = fast.dispatch(), slow.dispatch()
        elif op in ("abort", "progress", "finish") and known:
            s = rng.choice(known)
            if op == "abort":
                got, want = fast.abort(s), slow.abort(s)
            elif op == "progress":
                g = rng.randint(0, 300)
                got, want = fast.on_progress(s, g), slow.on_progress(s, g)
            else:
                got, want = fast.on_finish(s), slow.on_finish(s)
        elif op == "up" and off:
            ids = rng.sample(off, rng.randint(1, len(off)))
            got, want = fast.shift_up(ids), slow.shift_up(ids)
        elif op == "down" and len(slow.active_ids) > 1:
            ids = rng.sample(slow.active_ids, rng.randint(1, len(slow.active_ids) - 1))
            got, want = fast.shift_down(ids), slow.shift_down(ids)
        else:
            continue
        assert got == want, op
        assert state(fast) == state(slow), op
        # queued() and what_if() skip the liveness scan when this count says nothing is stale
        assert fast.placement.stale == sum(
            not fast.placement._live(e) for e in fast.placement.queue
        ), op


@pytest.mark.parametrize("seed", range(10))
def test_batched_progress_matches_one_call_each(seed: int) -> None:
    """`on_progress_many` leaves the state (T_i included) and the next dispatch exactly as the
    same reports one `on_progress` call each, queued sequences and repeats included."""
    rng = random.Random(seed)
    specs = [Replica(i, "rollout", (i,), 3000, rng.choice(MODELS)) for i in range(4)]
    one, many = (
        ShiftAwareScheduler(specs, active=[0, 1, 2]),
        ShiftAwareScheduler(specs, active=[0, 1, 2]),
    )
    for sid in range(40):
        seq = SeqState(sid, rng.randint(1, 200), rng.randint(0, 20))
        one.submit(seq)
        many.submit(seq)
    assert one.dispatch() == many.dispatch()
    for _ in range(5):
        pairs = [(rng.randrange(40), rng.randint(20, 400)) for _ in range(25)]
        for s, g in pairs:
            one.on_progress(s, g)
        many.on_progress_many(pairs)
        assert state(many) == state(one)
    # new work: the next placement reads the refreshed terms
    extra = [SeqState(sid, rng.randint(1, 200), 0) for sid in range(40, 60)]
    for seq in extra:
        one.submit(seq)
        many.submit(seq)
    assert many.dispatch() == one.dispatch()
    assert state(many) == state(one)


def test_batched_progress_rejects_bad_input_after_applying_the_pairs_before() -> None:
    specs = [Replica(0, "rollout", (0,), 3000, MODELS[0])]
    one, many = ShiftAwareScheduler(specs, active=[0]), ShiftAwareScheduler(specs, active=[0])
    for s in (one, many):
        s.submit(SeqState(0, 10, 0))
        s.dispatch()
    one.on_progress(0, 5)
    with pytest.raises(KeyError, match="unknown sequence 9"):
        many.on_progress_many([(0, 5), (9, 1)])
    assert state(many) == state(one)
    with pytest.raises(ValueError, match="negative generated"):
        many.on_progress_many([(0, -1)])
