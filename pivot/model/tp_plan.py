"""How each Hugging Face parameter of a dense decoder splits under tensor parallelism.

Pure Python (no torch): the engine shards weights with it and GPS plans transfers with it,
so both agree on which dimension of which tensor a TP rank owns.
"""

from __future__ import annotations

import enum


class Split(str, enum.Enum):
    """Partitioning of one tensor across the ranks of a TP group."""

    COLUMN = "column"  # output features split: dim 0 of a Linear weight (and its bias)
    ROW = "row"  # input features split: dim 1 of a Linear weight; output all-reduced
    VOCAB = "vocab"  # vocabulary rows split: dim 0 of embeddings and lm_head
    REPLICATE = "replicate"  # every rank holds the whole tensor (norms)
    EXPERTS_GATE_UP = "experts_gate_up"  # fused [E, 2I, H]: dim 2 of its view [E, 2, I, H]
    EXPERTS_DOWN = "experts_down"  # fused [E, H, I]: the intermediate dim 2

    @property
    def dim(self) -> int | None:
        """The split dimension of the tensor's `split_view`."""
        return {
            Split.COLUMN: 0,
            Split.ROW: 1,
            Split.VOCAB: 0,
            Split.REPLICATE: None,
            Split.EXPERTS_GATE_UP: 2,
            Split.EXPERTS_DOWN: 2,
        }[self]


def split_view(name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape in which tensor `name`'s TP share is one box on `tp_split(name).dim`: its own
    shape, except a fused experts' gate_up_proj [E, 2I, H] viewed as [E, 2, I, H] (same bytes,
    row-major). Idempotent: a shape already viewed is returned as it is."""
    if name.endswith(_EXPERTS_GATE_UP) and len(shape) == 3:
        e, two_i, h = shape
        if two_i % 2:
            raise ValueError(f"tensor {name!r}: gate_up_proj rows {two_i} are not two equal halves")
        return (e, 2, two_i // 2, h)
    return tuple(shape)


def merge_view(name: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The inverse of `split_view`: a viewed [E, 2, I', H] back to the tensor's [E, 2I', H]."""
    if name.endswith(_EXPERTS_GATE_UP) and len(shape) == 4:
        e, two, i, h = shape
        return (e, two * i, h)
    return tuple(shape)


# Fused experts (Qwen3.5 on the hub, transformers 5's `Qwen3_5MoeExperts`): one 3-D tensor per
# layer. down_proj [E, H, I] splits its intermediate dim 2 like a row-parallel Linear; gate_up_proj
# [E, 2I, H] stacks the gate's I rows on the up's, so a rank keeps a slice of each half: in the
# view [E, 2, I, H] (`split_view`) that share is one box on dim 2.
_EXPERTS_GATE_UP, _EXPERTS_DOWN = ".mlp.experts.gate_up_proj", ".mlp.experts.down_proj"
_COLUMN = (
    "q_proj",
    "k_proj",
    "v_proj",
    "gate_proj",
    "up_proj",
    "in_proj_z",
    "in_proj_b",
    "in_proj_a",
)
_ROW = ("o_proj", "down_proj", "out_proj")
_VOCAB = ("embed_tokens", "lm_head")
_HEAD_VECTORS = ("dt_bias", "A_log")  # one entry per linear-attention value head
# Tensors that concatenate several column-parallel outputs on dim 0 (GLM-4's gate_up_proj, the
# linear attention's q|k|v projection and conv) stay whole here: a rank's share is a slice of
# every section, which the engine cuts itself (`pivot.engine.tp.fused_sections`).


def tp_split(name: str) -> Split:
    """The TP split of HF parameter `name` (e.g. 'model.layers.3.self_attn.q_proj.weight')."""
    if name.endswith(_EXPERTS_GATE_UP):
        return Split.EXPERTS_GATE_UP
    if name.endswith(_EXPERTS_DOWN):
        return Split.EXPERTS_DOWN
    parts = name.split(".")
    module = parts[-2] if len(parts) >= 2 else name
    if parts[-1] in _HEAD_VECTORS:
        return Split.COLUMN
    if module in _COLUMN:
        return Split.COLUMN
    if module in _ROW:
        # a row-parallel bias is added once after the all-reduce, so it stays whole
        return Split.ROW if parts[-1] == "weight" else Split.REPLICATE
    if module in _VOCAB:
        return Split.VOCAB
    return Split.REPLICATE


def shard_range(size: int, rank: int, world: int) -> tuple[int, int]:
    """[start, stop) of an even TP split; the size must divide (heads, vocab are padded upstream)."""
    if size % world:
        raise ValueError(f"dimension {size} does not divide evenly over {world} TP ranks")
    step = size // world
    return rank * step, (rank + 1) * step


def fsdp_range(size: int, rank: int, world: int) -> tuple[int, int]:
    """[start, stop) of FSDP2's dim-0 shard: torch.chunk semantics, ceil-sized, last ones short or empty."""
    step = -(-size // world)
    start = min(rank * step, size)
    return start, min(start + step, size)
