"""ShiftAwareScheduler: dispatch, abort, shift down / up migration, commands."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pivot.sched import Abort, Dispatch, Replica, SeqState, ShiftAwareScheduler, ThroughputModel

M = ThroughputModel(A=2e-6, B=0.012, C=1.5e-4, D=0.004)


def make(
    n: int, cap: int = 10_000, active: list[int] | None = None, **kw: object
) -> ShiftAwareScheduler:
    return ShiftAwareScheduler(
        [Replica(i, "rollout", (i,), cap, M) for i in range(n)], active=active, **kw
    )


def test_dispatch_picks_largest_gain_and_ties_to_smallest_id() -> None:
    s = make(3)
    s.submit(SeqState(0, 100))
    assert s.dispatch() == [Dispatch(0, 0)]  # all empty: tie -> smallest id
    s.submit(SeqState(1, 100))
    assert s.dispatch() == [Dispatch(1, 1)]  # an empty replica gains more
    s.submit(SeqState(2, 100))
    s.submit(SeqState(3, 100))
    assert s.dispatch() == [Dispatch(2, 2), Dispatch(3, 0)]


def test_head_waits_when_nothing_fits() -> None:
    s = make(2, cap=300)
    for i, ln in enumerate([250, 250, 200, 10]):
        s.submit(SeqState(i, ln))
    cmds = s.dispatch()
    assert cmds == [Dispatch(0, 0), Dispatch(1, 1)]
    assert [q.seq_id for q in s.queued()] == [2, 3]  # 2 does not fit; 3 waits behind it
    s.on_finish(0)
    assert s.dispatch() == [Dispatch(2, 0), Dispatch(3, 0)]


def test_priority_is_pluggable() -> None:
    s = make(1, cap=150, priority=lambda q: -q.seq_id)
    s.submit(SeqState(0, 100))
    s.submit(SeqState(1, 100))
    assert s.dispatch() == [Dispatch(1, 0)]


def test_abort_keeps_generated_tokens() -> None:
    s = make(2)
    s.submit(SeqState(5, 100))
    s.dispatch()
    s.on_progress(5, 40)
    assert s.load(0) == (1, 140)
    assert s.abort(5) == [Abort(5, 0)]
    assert s.queued()[0].generated == 40 and s.load(0) == (0, 0)


def test_shift_down_moves_everything_off() -> None:
    s = make(3)
    for i in range(9):
        s.submit(SeqState(i, 100 + i))
    s.dispatch()
    on2 = {q.seq_id for q in s.running(2)}
    cmds = s.shift_down([2])
    assert {c.seq_id for c in cmds if isinstance(c, Abort)} == on2
    assert all(c.replica_id in (0, 1) for c in cmds if isinstance(c, Dispatch))
    assert s.load(2) == (0, 0) and s.active_ids == [0, 1]
    assert cmds.index(next(c for c in cmds if isinstance(c, Dispatch))) == len(on2)  # aborts first


def test_shift_up_migrates_until_no_gain() -> None:
    s = make(4, active=[0])
    for i in range(40):
        s.submit(SeqState(i, 50 + 3 * i))
    s.dispatch()
    before = s.throughput()
    cmds = s.shift_up([1, 2, 3])
    assert s.throughput() > before
    moved = [c for c in cmds if isinstance(c, Dispatch)]
    assert moved and all(c.replica_id in (1, 2, 3) for c in moved)
    loads = [s.load(i)[0] for i in range(4)]
    assert sum(loads) == 40 and max(loads) - min(loads) <= 2


def test_no_migration_only_drains_queue() -> None:
    s = make(2, active=[0], migrate=False)
    for i in range(10):
        s.submit(SeqState(i, 100))
    s.dispatch()
    assert s.shift_up([1]) == [] and s.load(1) == (0, 0)


def test_load_state_equals_adopt_then_submit() -> None:
    running = {0: [SeqState(4, 30, 5), SeqState(1, 80)], 2: [SeqState(7, 10, 2)]}
    queue = [SeqState(9, 40), SeqState(3, 60, 9)]
    bulk, one = make(3, cap=200), make(3, cap=200)
    bulk.load_state(running, queue)
    for rid, seqs in running.items():
        for q in seqs:
            one.adopt(q, rid)
    for q in queue:
        one.submit(q)
    for s in (bulk, one):
        assert (
            [q.seq_id for q in s.queued()] == [3, 9]
            and s.load(0) == (2, 115)
            and s.load(2) == (1, 12)
        )
    assert [bulk.replica_throughput(r) for r in range(3)] == [
        one.replica_throughput(r) for r in range(3)
    ]
    assert bulk.dispatch() == one.dispatch() == [Dispatch(3, 1), Dispatch(9, 2)]
    with pytest.raises(ValueError, match="sequence 4 is already known"):
        make(3).load_state({0: [SeqState(4, 1)]}, [SeqState(4, 1)])
    with pytest.raises(ValueError, match="inactive replica 1"):
        make(3, active=[0]).load_state({1: [SeqState(4, 1)]}, [])


def test_bad_calls_name_the_item() -> None:
    s = make(2, active=[0])
    with pytest.raises(ValueError, match="replica 1 is not active"):
        s.shift_down([1])
    with pytest.raises(ValueError, match="unknown replica 7"):
        s.shift_up([7])
    with pytest.raises(KeyError, match="unknown sequence 3"):
        s.abort(3)
    s.submit(SeqState(1, 5))
    with pytest.raises(ValueError, match="already known"):
        s.submit(SeqState(1, 5))
    with pytest.raises(ValueError, match="negative length"):
        SeqState(2, -1)


# ----------------------------------------------------------------------------- properties
ops = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.integers(1, 400)),
        st.tuples(st.just("dispatch"), st.just(0)),
        st.tuples(st.just("up"), st.integers(0, 5)),
        st.tuples(st.just("down"), st.integers(0, 5)),
        st.tuples(st.just("abort"), st.integers(0, 60)),
        st.tuples(st.just("finish"), st.integers(0, 60)),
        st.tuples(st.just("progress"), st.integers(0, 60)),
    ),
    max_size=40,
)


def run_ops(s: ShiftAwareScheduler, steps: list[tuple[str, int]], progress: bool) -> None:
    mirror: dict[int, int | None] = {}  # seq id -> replica, replaying the emitted commands
    next_id = 0
    for op, arg in steps:
        cmds: list = []
        if op == "submit":
            s.submit(SeqState(next_id, arg))
            mirror[next_id] = None
            next_id += 1
        elif op == "dispatch":
            cmds = s.dispatch()
        elif op == "up" and arg in s.replica_ids and arg not in s.active_ids:
            cmds = s.shift_up([arg])
        elif op == "down" and arg in s.active_ids:
            cmds = s.shift_down([arg])
        elif op == "abort" and arg in mirror:
            cmds = s.abort(arg)
        elif op == "finish" and arg in mirror:
            s.on_finish(arg)
            del mirror[arg]
        elif op == "progress" and arg in mirror and progress:
            s.on_progress(arg, s.placement.location(arg) is not None and 7 or 0)
        for c in cmds:
            if isinstance(c, Abort):
                assert mirror[c.seq_id] == c.replica_id
                mirror[c.seq_id] = None
            else:
                assert mirror[c.seq_id] is None and c.replica_id in s.active_ids
                mirror[c.seq_id] = c.replica_id
        # no loss, no duplicate: every known sequence is in exactly one place
        assert mirror == {sid: s.placement.location(sid) for sid in mirror}
        placed = [q.seq_id for r in s.replica_ids for q in s.running(r)] + [
            q.seq_id for q in s.queued()
        ]
        assert sorted(placed) == sorted(mirror)
        for r in s.replica_ids:
            n, tok = s.load(r)
            assert n == len(s.running(r)) and tok == sum(q.length for q in s.running(r))
            assert s.replica_throughput(r) == s.placement.spec(r).model.throughput(
                n, tok
            )  # one T_i, bit for bit
            if r not in s.active_ids:
                assert n == 0
            if not progress:
                assert tok <= s.placement.spec(r).kv_capacity


@settings(max_examples=80, deadline=None)
@given(st.lists(st.integers(100, 1500), min_size=1, max_size=6), ops)
def test_dispatch_never_exceeds_kv_capacity(caps: list[int], steps: list[tuple[str, int]]) -> None:
    s = ShiftAwareScheduler(
        [Replica(i, "reward", (i,), c, M) for i, c in enumerate(caps)], active=[0]
    )
    run_ops(s, steps, progress=False)


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 6), ops)
def test_no_sequence_lost_or_duplicated(n: int, steps: list[tuple[str, int]]) -> None:
    run_ops(make(n, cap=2000, active=[0]), steps, progress=True)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(2, 8),
    st.lists(st.integers(1, 600), min_size=0, max_size=80),
    st.floats(0.0, 1e-5),
    st.floats(0.0, 5e-4),
    st.data(),
)
def test_shift_up_never_lowers_throughput(
    n: int, lens: list[int], a: float, c: float, data: st.DataObject
) -> None:
    model = ThroughputModel(A=a, B=0.01, C=c, D=0.003)
    s = ShiftAwareScheduler(
        [Replica(i, "rollout", (i,), 5000, model) for i in range(n)], active=[0]
    )
    for i, ln in enumerate(lens):
        s.submit(SeqState(i, ln))
    s.dispatch()
    up = data.draw(st.sets(st.integers(1, n - 1), min_size=1))
    before = s.throughput()
    s.shift_up(sorted(up))
    assert s.throughput() >= before * (1 - 1e-12)
