"""Paged KV-cache bookkeeping: fixed-size blocks, one block table per sequence. Pure Python."""
from __future__ import annotations


class BlockManager:
    def __init__(self, num_blocks: int, block_size: int) -> None:
        if num_blocks < 1 or block_size < 1:
            raise ValueError(f"BlockManager needs num_blocks >= 1 and block_size >= 1, got {num_blocks}, {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        # pop() takes from the end: keep low block ids first for readable tables
        self._free = list(range(num_blocks - 1, -1, -1))
        self.tables: dict[int, list[int]] = {}

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def free_tokens(self) -> int:
        return len(self._free) * self.block_size

    @property
    def total_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def extra_blocks(self, seq_id: int, num_tokens: int) -> int:
        """Blocks `seq_id` still needs to hold `num_tokens` tokens."""
        have = len(self.tables.get(seq_id, ()))
        return max(self.blocks_for(num_tokens) - have, 0)

    def ensure(self, seq_id: int, num_tokens: int) -> bool:
        """Grow `seq_id`'s table to hold `num_tokens`; all or nothing."""
        need = self.extra_blocks(seq_id, num_tokens)
        if need > len(self._free):
            return False
        table = self.tables.setdefault(seq_id, [])
        for _ in range(need):
            table.append(self._free.pop())
        return True

    def free(self, seq_id: int) -> None:
        self._free.extend(reversed(self.tables.pop(seq_id, [])))

    def slot(self, seq_id: int, pos: int) -> int:
        """Flat cache slot of token `pos` of `seq_id`."""
        return self.tables[seq_id][pos // self.block_size] * self.block_size + pos % self.block_size

    def slots(self, seq_id: int, start: int, stop: int) -> list[int]:
        table, bs = self.tables[seq_id], self.block_size
        return [table[p // bs] * bs + p % bs for p in range(start, stop)]
