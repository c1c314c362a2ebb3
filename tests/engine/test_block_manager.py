"""Block manager and scheduler: pure-Python bookkeeping."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pivot.engine.block_manager import BlockManager
from pivot.engine.scheduler import Scheduler
from pivot.engine.sequence import SamplingParams, SeqStatus, Sequence


def _seq(i: int, n: int) -> Sequence:
    return Sequence(
        id=i,
        token_ids=list(range(n)),
        prompt_len=n,
        params=SamplingParams(),
        logprobs=[],
        arrival=i,
    )


def test_blocks_all_or_nothing() -> None:
    bm = BlockManager(num_blocks=4, block_size=4)
    a, b = _seq(0, 9), _seq(1, 8)
    assert bm.allocate(a, 9) and bm.num_free_blocks == 1  # 3 blocks
    assert not bm.allocate(b, 8) and 1 not in bm.tables and bm.num_free_blocks == 1
    assert (
        bm.allocate(a, 12)
        and len(bm.tables[0]) == 3
        and bm.allocate(a, 16)
        and not bm.allocate(a, 17)
    )
    bm.free(a)
    assert bm.num_free_blocks == 4 and bm.free_tokens == 16 and bm.ref == [0] * 4


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 30), min_size=1, max_size=12), st.integers(1, 40), st.integers(1, 5))
def test_scheduler_invariants(lens: list[int], budget: int, max_running: int) -> None:
    """Simulated decoding: budgets and caps hold, blocks never leak, every sequence completes.

    The prompts are prefixes of one another, so they share cached blocks."""
    bm = BlockManager(num_blocks=16, block_size=4)
    sched = Scheduler(bm, max_running_seqs=max_running, max_prefill_tokens=budget)
    seqs = [_seq(i, n) for i, n in enumerate(lens)]
    for s in seqs:
        sched.add(s)
    target = {s.id: len(s.token_ids) + 3 for s in seqs}  # generate 3 tokens each
    for _ in range(2000):
        if not sched.running and not sched.waiting:
            break
        plan = sched.schedule()
        assert len(sched.running) <= max_running
        prefill = sum(p.num_tokens for p in plan if p.num_tokens > 1 or p.start == 0)
        assert prefill <= budget
        used = {b for t in bm.tables.values() for b in t} | set(bm._pinned)
        assert len(used) + bm.num_free_blocks == 16
        assert all(bm.ref[b] > 0 for b in used)
        for p in plan:
            assert p.seq.status is SeqStatus.RUNNING and p.start == p.seq.num_computed
            assert len(bm.tables[p.seq.id]) * 4 >= p.start + p.num_tokens
        bm.copies_done()
        sched.commit(plan)
        for p in plan:
            if p.samples:
                p.seq.token_ids.append(0)
                if len(p.seq.token_ids) >= target[p.seq.id]:
                    sched.remove(p.seq)
                    p.seq.status = SeqStatus.FINISHED
    assert all(s.status is SeqStatus.FINISHED for s in seqs)
    assert bm.num_free_blocks == 16 and bm.ref == [0] * 16
    assert sched.prefill_tokens + sched.prefix_hit_tokens >= sum(lens)
