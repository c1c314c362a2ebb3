"""What the embedded tiny models are made from: the recipe and the problems they learnt.

Pure Python (no torch): the data loaders, the held-out split and the manifest check read it
without building anything.
"""

from __future__ import annotations

import dataclasses

from pivot.tiny import synthetic as syn


@dataclasses.dataclass(frozen=True)
class TinyRecipe:
    """Everything the build depends on (recorded in the shipped manifest)."""

    hidden_size: int = 128
    layers: int = 2
    heads: int = 8  # 8 heads of 16 dims, not 4 of 32: reading digits by position needs many heads
    kv_heads: int = 8
    intermediate_size: int = 256
    train_problems: int = 8000
    max_digits: int = 3  # operands of 1..max_digits digits: short ones are learnt, long ones fail
    policy_steps: int = (
        1300  # constant rate: ~25% greedy held-out, mid-climb; RL lifts it from there
    )
    policy_warmup: int = 90
    genrm_seed_steps: int = 1200  # the GenRM's own start (a decayed rate: ~60% greedy)
    genrm_base_steps: int = 1500  # more column practice before judging
    genrm_steps: int = 800
    batch_size: int = 32
    lr: float = 3e-3
    eval_problems: int = 200
    genrm_own_samples: int = 2048  # judge examples on its start's own sampled answers
    judge_right: float = 0.1  # of the other judge examples: right solutions,
    judge_slips: float = 0.5  # plausible slips; the rest random wrong answers after right columns
    threads: int = 1  # torch threads of the build: one cannot spin against another process's core


def sft_problems(seed: int = 0, recipe: TinyRecipe | None = None) -> list[syn.Problem]:
    """The problems the embedded tiny policy (and, from its weights, the GenRM) learnt from."""
    recipe = recipe or TinyRecipe()
    return syn.generate_problems(recipe.train_problems, seed, max_digits=recipe.max_digits)
