"""Prefix sharing in the block manager, against a shadow cache that records what each slot holds.

The shadow is the oracle: a slot written for token p of a sequence holds that sequence's tokens
[0, p] and the weight generations they were computed under. Whatever the block manager lets a
new sequence reuse must hold exactly its own prefix, computed under the current weights.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pivot.engine.block_manager import BlockManager
from pivot.engine.sequence import SamplingParams, Sequence

BS, NUM_BLOCKS = 4, 12
BASES = [[5, 6, 7, 8, 9, 10, 11], [5, 6, 7, 8, 20, 21], [30, 31, 32]]


def _seq(i: int, tokens: list[int]) -> Sequence:
    return Sequence(
        id=i,
        token_ids=list(tokens),
        prompt_len=len(tokens),
        params=SamplingParams(),
        logprobs=[],
        arrival=i,
    )


class Shadow:
    """Drives a BlockManager like the scheduler and model runner do, mirroring slot contents."""

    def __init__(self) -> None:
        self.bm = BlockManager(NUM_BLOCKS, BS)
        self.slots: dict[tuple[int, int], tuple[tuple[int, ...], frozenset[int]]] = {}
        self.generation = 0
        self.placed: dict[int, Sequence] = {}  # in the cache; num_computed may lag len(token_ids)
        self.next_id = 0

    def content(self, seq: Sequence, p: int) -> tuple[tuple[int, ...], frozenset[int]] | None:
        return self.slots.get((self.bm.tables[seq.id][p // BS], p % BS))

    def place(self, tokens: list[int]) -> None:
        seq = _seq(self.next_id, tokens)
        self.next_id += 1
        match = self.bm.match(seq)
        if match is None:  # a prefix of it is placed but not computed yet
            assert any(s.num_computed < len(s.token_ids) for s in self.placed.values())
            return
        assert 0 <= match.num_tokens < len(tokens)
        if not self.bm.allocate(seq, len(tokens), match):
            assert seq.id not in self.bm.tables
            return
        self.run_copies()
        want = frozenset({self.generation})
        for p in range(match.num_tokens):
            assert self.content(seq, p) == (tuple(tokens[: p + 1]), want), (p, tokens)
        seq.num_computed = match.num_tokens
        self.placed[seq.id] = seq

    def run_copies(self) -> None:
        for src, dst in self.bm.copies:
            for slot in range(BS):
                if (src, slot) in self.slots:
                    self.slots[dst, slot] = self.slots[src, slot]
        self.bm.copies_done()

    def compute(self, seq: Sequence, n: int) -> None:
        start = seq.num_computed
        for p in range(start):  # its context is intact: nobody wrote into its blocks
            assert self.content(seq, p)[0] == tuple(seq.token_ids[: p + 1]), (seq.id, p)
        n = min(n, len(seq.token_ids) - start)
        for p in range(start, start + n):
            prev = self.content(seq, p - 1)[1] if p else frozenset()
            block = self.bm.tables[seq.id][p // BS]
            self.slots[block, p % BS] = (tuple(seq.token_ids[: p + 1]), prev | {self.generation})
        seq.num_computed += n
        if n:
            self.bm.commit(seq, start, n)

    def grow(self, seq: Sequence, token: int) -> None:
        """Decode: a sampled token joins the sequence, the cache makes room for it."""
        if seq.num_computed == len(seq.token_ids) and self.bm.allocate(seq, len(seq.token_ids) + 1):
            seq.token_ids.append(token)

    def free(self, seq: Sequence) -> None:
        self.bm.free(seq)
        del self.placed[seq.id]

    def check(self) -> None:
        bm = self.bm
        held = {b for t in bm.tables.values() for b in t} | set(bm._pinned)
        empty, cached = set(bm._empty), set(bm._cached)
        assert (
            len(empty) == len(bm._empty) and not (empty & cached) and not (held & (empty | cached))
        )
        assert held | empty | cached == set(range(NUM_BLOCKS))
        for b in range(NUM_BLOCKS):
            users = sum(t.count(b) for t in bm.tables.values()) + bm._pinned.count(b)
            assert bm.ref[b] == users, b
            assert all(bm.index[k] == b for k in bm.keys[b])
        assert sum(len(k) for k in bm.keys) == len(bm.index)
        assert all(not bm.keys[b] for b in empty) and all(bm.keys[b] for b in cached)
        assert bm.num_free_blocks == NUM_BLOCKS - len(held)


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_shared_prefixes_hold_the_right_tokens(data: st.DataObject) -> None:
    sh = Shadow()
    for _ in range(data.draw(st.integers(5, 40))):
        op = data.draw(
            st.sampled_from(
                ["place", "place", "compute", "compute", "compute", "grow", "free", "reset"]
            )
        )
        live = sorted(sh.placed)
        if op == "place":
            base = data.draw(st.sampled_from(BASES))
            cut = data.draw(st.integers(1, len(base)))
            tail = data.draw(st.lists(st.integers(40, 42), max_size=3))
            sh.place(base[:cut] + tail)
        elif op == "compute" and live:
            for i in live:
                sh.compute(sh.placed[i], data.draw(st.integers(1, 6)))
        elif op == "grow" and live:
            sh.grow(sh.placed[data.draw(st.sampled_from(live))], data.draw(st.integers(5, 8)))
        elif op == "free" and live:
            sh.free(sh.placed[data.draw(st.sampled_from(live))])
        elif op == "reset":
            sh.bm.reset_cache()
            sh.generation += 1
        sh.check()
    for i in sorted(sh.placed):
        sh.free(sh.placed[i])
    sh.check()
    assert sh.bm.ref == [0] * NUM_BLOCKS and sh.bm.num_free_blocks == NUM_BLOCKS


def test_identical_prompts_share_and_copy_the_divergent_block() -> None:
    """Hand-worked: 10 tokens in blocks of 4 are blocks 0, 1 (full) and 2 (2 tokens)."""
    sh = Shadow()
    prompt = list(range(10, 20))
    sh.place(prompt)
    first = sh.placed[0]
    assert sh.bm.match(_seq(99, prompt)) is None  # placed, not computed: wait for it
    sh.compute(first, 10)
    a, b, c = sh.bm.tables[0]
    sh.place(prompt)
    second = sh.placed[1]
    assert second.num_computed == 9  # the last token is computed again, for its logits
    t = sh.bm.tables[1]
    assert t[:2] == [a, b] and t[2] not in (a, b, c)  # block 2 copied: the second writes into it
    assert sh.bm.ref[a] == sh.bm.ref[b] == 2 and sh.bm.ref[c] == 1
    sh.compute(second, 1)
    sh.free(first)
    assert sh.bm.ref[a] == 1 and sh.bm.num_free_blocks == NUM_BLOCKS - 3
    sh.free(second)
    assert sh.bm.ref == [0] * NUM_BLOCKS
    sh.place(prompt + [50])  # everything still cached: 10 tokens reused, none copied
    assert sh.placed[2].num_computed == 10 and sh.bm.tables[2][:2] == [a, b] and not sh.bm.copies
    sh.check()


def test_lru_eviction_under_pressure() -> None:
    """A freed sequence's tail is evicted first; its head stays reusable."""
    sh = Shadow()
    sh.place(list(range(100, 108)))  # 2 blocks
    sh.compute(sh.placed[0], 8)
    head, tail = sh.bm.tables[0]
    sh.free(sh.placed[0])
    assert sh.bm.num_free_blocks == NUM_BLOCKS and list(sh.bm._cached) == [tail, head]
    sh.place(list(range(200, 244)))  # 11 blocks: the 10 empty ones and the oldest cached one
    assert tail in sh.bm.tables[1] and list(sh.bm._cached) == [head]
    sh.compute(sh.placed[1], 44)
    sh.free(sh.placed[1])
    assert sh.bm.match(_seq(9, list(range(100, 108)) + [1])).num_tokens == 4
    sh.check()
