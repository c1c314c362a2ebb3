"""Paged KV-cache bookkeeping with prefix sharing. Pure Python.

The cache is cut into blocks of `block_size` token slots; each sequence owns a block table.
A block's K/V depend only on the tokens up to and including its own, so a block is named by
a key: (the chained hash of the blocks before it, the tokens it holds). Full blocks are keyed
when their tokens are known; a sequence's last, partially filled block is keyed by the tokens
it holds when its prompt is placed and when the sequence leaves. A slot, once written, is never
rewritten while its block lives, so a key stays true for as long as its block is not reused.

A new sequence takes the longest run of keyed blocks that spells its first tokens: each shared
block gains a reference. Its last token is always computed (its logits are needed), so when
the reused prefix ends inside a block, that block is copied first (copy-on-write at the first
divergent block): `copies` lists (source, destination) pairs for the model runner to execute
before the next step, the source pinned until `copies_done`. A key whose block is not yet
computed (`filled`) makes the newcomer wait a step instead of computing the same tokens twice:
a group of identical prompts submitted together is prefilled once.

Blocks nobody references keep their keys and are reused in least-recently-freed order once
the blocks holding nothing run out.

With `share_prefixes=False` no block is ever keyed: every sequence computes all its tokens,
nothing is copied, freed blocks go straight back to the empty pool (the engine's choice for
models with linear-attention layers, whose recurrent state a reused prefix would skip).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from pivot.engine.sequence import Sequence

Key = tuple[int, tuple[int, ...]]
ROOT = 0
"""Parent hash of a sequence's first block."""


@dataclass
class PrefixMatch:
    blocks: list[int]
    """Cached blocks spelling the sequence's first tokens, in table order."""
    num_tokens: int
    """Tokens whose K/V those blocks hold and the sequence reuses (< its length)."""


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int, share_prefixes: bool = True) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(
                f"BlockManager needs num_blocks >= 1 and block_size >= 1, got {num_blocks}, {block_size}"
            )
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.share_prefixes = share_prefixes
        self.ref = [0] * num_blocks
        self.filled = [0] * num_blocks
        """Slots of each block holding computed K/V."""
        self.chain: list[int | None] = [None] * num_blocks
        """Hash of each full block's key: the parent of the next block's key (None: unknown)."""
        self.keys: list[list[Key]] = [[] for _ in range(num_blocks)]
        self.index: dict[Key, int] = {}
        # pop() takes from the end: low block ids first, for readable tables
        self._empty = list(range(num_blocks - 1, -1, -1))
        self._cached: OrderedDict[int, None] = OrderedDict()  # unreferenced but keyed; oldest first
        self.tables: dict[int, list[int]] = {}
        self.copies: list[tuple[int, int]] = []
        self._pinned: list[int] = []
        self._generation = 0
        self._born = [0] * num_blocks  # blocks from before the last reset_cache are never keyed

    @property
    def num_free_blocks(self) -> int:
        return len(self._empty) + len(self._cached)

    @property
    def free_tokens(self) -> int:
        return self.num_free_blocks * self.block_size

    @property
    def total_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def extra_blocks(self, seq_id: int, num_tokens: int) -> int:
        """Blocks `seq_id` still needs to hold `num_tokens` tokens (ignoring prefix reuse)."""
        have = len(self.tables.get(seq_id, ()))
        return max(self.blocks_for(num_tokens) - have, 0)

    # ---- prefix lookup -------------------------------------------------------------------
    def match(self, seq: Sequence) -> PrefixMatch | None:
        """The cached prefix `seq` (not yet placed) can reuse; None while it is being computed."""
        tokens, bs = seq.token_ids, self.block_size
        n, pos = len(tokens), 0
        # a block's chain is None until its key is known; no key has a None parent (`_add_key`)
        parent: int | None = ROOT
        blocks: list[int] = []
        while pos + bs <= n:
            b = None if parent is None else self.index.get((parent, tuple(tokens[pos : pos + bs])))
            if b is None:
                break
            if self.filled[b] < bs:
                return None
            blocks.append(b)
            parent, pos = self.chain[b], pos + bs
        for r in range(min(bs - 1, n - pos), 0, -1):
            b = None if parent is None else self.index.get((parent, tuple(tokens[pos : pos + r])))
            if b is not None:
                if self.filled[b] < r:
                    return None
                blocks.append(b)
                pos += r
                break
        used = min(pos, n - 1)
        return PrefixMatch(blocks[: self.blocks_for(used)], used)

    # ---- allocation ----------------------------------------------------------------------
    def allocate(self, seq: Sequence, num_tokens: int, match: PrefixMatch | None = None) -> bool:
        """Grow `seq`'s table to hold `num_tokens` tokens; all or nothing.

        The first call places the sequence, reusing `match` (from `match(seq)`, just before)."""
        table = self.tables.get(seq.id)
        if table is not None:
            grow = self.blocks_for(num_tokens) - len(table)
            if grow > self.num_free_blocks:
                return False
            for _ in range(grow):
                table.append(self._take_free())
                self._key_known(seq, table, len(table) - 1)
            return True
        shared = match.blocks if match is not None else []
        divergent = match is not None and match.num_tokens % self.block_size != 0
        kept = len(shared) - divergent
        fresh = self.blocks_for(num_tokens) - kept
        if fresh > self.num_free_blocks - sum(self.ref[b] == 0 for b in shared):
            return False
        table = []
        for b in shared:
            self._hold(b)
        table.extend(shared[:kept])
        if divergent and match is not None:
            src = shared[-1]
            dst = self._take_free()
            self._pinned.append(src)
            self.copies.append((src, dst))
            self.filled[dst] = match.num_tokens % self.block_size
            table.append(dst)
            self._key_known(seq, table, len(table) - 1)
            fresh -= 1
        for _ in range(fresh):
            table.append(self._take_free())
            self._key_known(seq, table, len(table) - 1)
        self.tables[seq.id] = table
        return True

    def copies_done(self) -> None:
        """The model runner executed `copies`: unpin their sources."""
        self.copies.clear()
        for b in self._pinned:
            self._release(b)
        self._pinned.clear()

    def commit(self, seq: Sequence, start: int, num_tokens: int) -> None:
        """Slots [start, start + num_tokens) of `seq` now hold computed K/V."""
        table, bs, end = self.tables[seq.id], self.block_size, start + num_tokens
        for i in range(start // bs, (end - 1) // bs + 1):
            b = table[i]
            self.filled[b] = min(bs, end - i * bs)
            if self.filled[b] == bs and self.chain[b] is None:
                self._key_known(seq, table, i)

    def free(self, seq: Sequence) -> None:
        """Drop `seq`'s references; its computed blocks stay cached until reused."""
        table = self.tables.pop(seq.id, None)
        if table is None:
            return
        bs, done = self.block_size, seq.num_computed
        i = done // bs
        if done % bs and i < len(table) and self.filled[table[i]] >= done % bs:
            self._add_key(table, i, seq.token_ids[i * bs : done])  # the computed tail, for a resume
        for b in reversed(table):  # the tail is freed first, so it is evicted first
            self._release(b)

    def reset_cache(self) -> None:
        """Forget every key (the weights changed: cached K/V are stale); tables are kept."""
        self._generation += 1
        self.index.clear()
        for b in range(self.num_blocks):
            self.keys[b].clear()
            self.chain[b] = None
        self._empty.extend(reversed(self._cached))
        self._cached.clear()

    # ---- internals -----------------------------------------------------------------------
    def _key_known(self, seq: Sequence, table: list[int], i: int) -> None:
        """Key block `i` of `table` by its tokens known so far (all of them, or the prompt's tail)."""
        bs = self.block_size
        self._add_key(table, i, seq.token_ids[i * bs : (i + 1) * bs])

    def _add_key(self, table: list[int], i: int, tokens: list[int]) -> None:
        if not self.share_prefixes or not tokens or self._born[table[i]] != self._generation:
            return
        parent = ROOT if i == 0 else self.chain[table[i - 1]]
        if parent is None:
            return
        key, b = (parent, tuple(tokens)), table[i]
        if len(tokens) == self.block_size:
            self.chain[b] = hash(key)
        if key not in self.index:
            self.index[key] = b
            self.keys[b].append(key)

    def _hold(self, b: int) -> None:
        if self.ref[b] == 0:
            del self._cached[b]
        self.ref[b] += 1

    def _take_free(self) -> int:
        if self._empty:
            b = self._empty.pop()
        else:
            b, _ = self._cached.popitem(last=False)
            self._forget(b)
        self.ref[b], self.filled[b], self.chain[b], self._born[b] = 1, 0, None, self._generation
        return b

    def _forget(self, b: int) -> None:
        for key in self.keys[b]:
            del self.index[key]
        self.keys[b].clear()

    def _release(self, b: int) -> None:
        self.ref[b] -= 1
        if self.ref[b]:
            return
        f = self.filled[b]
        if f < self.block_size:
            self.chain[b] = None
        keys = self.keys[b]
        if any(len(k[1]) > f for k in keys):  # keyed before it was computed, and never was
            for key in keys:
                if len(key[1]) > f:
                    del self.index[key]
            keys[:] = [k for k in keys if len(k[1]) <= f]
        if keys:
            self._cached[b] = None
        else:
            self._empty.append(b)
