"""The embedded default task as inputs of the RL code, and the one place a run falls back to it.

`pivot/rl/` knows no default task: it loads the dataset it is given a path to, holds out what it
is told to, and fills the judge template it is handed. Where the config names none, this module
gives the synthetic arithmetic task of `pivot.tiny.synthetic` (the one the tiny models learn):

    training_set(data, seed)                 --data.path's rows, else the synthetic set
    heldout_split(data, eval, train, seed)   rl's split; for the synthetic set, fresh problems
    judge_template(reward)                   --reward.judge-template(-file), else the tiny GenRM's
    judge_template_warning(cfg)              the line a real GenRM given the tiny GenRM's prompt gets
"""

from __future__ import annotations

import dataclasses
from functools import partial
from pathlib import Path

from pivot.config import DataConfig, EvalConfig, PivotConfig, RewardConfig
from pivot.rl.data import Prompt, PromptDataset, load_dataset, rows_to_dataset
from pivot.rl.evaluation import split_heldout
from pivot.rl.plugins import judge_template as configured_template
from pivot.tiny import synthetic
from pivot.tiny.recipe import sft_problems
from pivot.tiny.shipped import WEIGHTS

TOOLS_WEIGHTS = (
    WEIGHTS.parent / "weights_tools"
)  # the tiny tools models (pivot/tiny/tools_build.py)

RL_SEED = 0x5EED_DA7A
HELDOUT_SEED = 0x5EED_E7A1  # keeps the synthetic held-out draw apart from any training seed


def synthetic_dataset(config: DataConfig, seed: int = 0) -> PromptDataset:
    """`config.synthetic_size` problems of the synthetic task drawn with `seed`."""
    c = config
    problems = synthetic.generate_problems(c.synthetic_size, seed, c.min_digits, c.max_digits)
    return rows_to_dataset(synthetic.to_rows(problems), DataConfig(), f"synthetic(seed={seed})")


def training_set(config: DataConfig, seed: int = 0) -> PromptDataset:
    """The dataset at `config.path`, or the synthetic set (seeded by `seed`) when it is empty."""
    if config.path:
        return load_dataset(config)
    # the tiny policy was fine-tuned on seed 0's draw (`pivot.tiny.recipe.sft_problems`): RL
    # draws elsewhere, so it shares only the small problems any two draws share
    return synthetic_dataset(config, RL_SEED + seed)


def fresh_heldout(data: DataConfig, n: int, seen: set[str], seed: int) -> list[Prompt]:
    """n problems of the synthetic task outside the RL set `seen`, and outside the embedded tiny
    policy's own training set while there are enough of those: a problem it was fine-tuned on
    is recalled, not solved (0.75 greedy accuracy on those against 0.40 on new ones)."""
    fine_tuned = {synthetic.policy_prompt(p) for p in sft_problems()}
    fresh: list[Prompt] = []
    recalled: list[Prompt] = []
    draw = 0
    pool = dataclasses.replace(data, synthetic_size=4 * n)
    while len(fresh) < n and draw < 8:  # the 1-3 digit space is large; a few draws always suffice
        for p in synthetic_dataset(pool, HELDOUT_SEED + 31 * seed + draw).prompts:
            if p.text not in seen:
                seen.add(p.text)
                (recalled if p.text in fine_tuned else fresh).append(p)
        draw += 1
    chosen = (fresh + recalled)[:n]
    return [dataclasses.replace(p, id=i) for i, p in enumerate(chosen)]


def heldout_split(
    data: DataConfig, config: EvalConfig, train: PromptDataset, seed: int
) -> tuple[PromptDataset, list[Prompt]]:
    """`pivot.rl.evaluation.split_heldout`, with fresh synthetic problems as the held-out set
    when the training set is the synthetic one (none of its rows is then given up)."""
    fresh = None if data.path else partial(fresh_heldout, data, seed=seed)
    return split_heldout(data, config, train, seed, fresh)


def judge_template(config: RewardConfig) -> str:
    """The run's judge template: the configured one, else the tiny GenRM's."""
    return configured_template(config) or synthetic.JUDGE_TEMPLATE


def judge_template_warning(cfg: PivotConfig) -> str | None:
    """One stderr line for a run whose GenRM is a real checkpoint (`--model.genrm`, not the shipped
    tiny one) but whose judge prompt is the tiny GenRM's: that prompt states no grading rule and
    no verdict format, so whether a real judge writes a verdict the parser reads is left to
    chance. None when the run configures a template or judges with the tiny GenRM."""
    r = cfg.reward
    if not cfg.model.genrm or r.judge_template or r.judge_template_file:
        return None
    genrm = Path(cfg.model.genrm).resolve()
    if genrm.is_relative_to(WEIGHTS) or genrm.is_relative_to(TOOLS_WEIGHTS):  # a tiny GenRM
        return None
    return (
        f"pivot: warning: GenRM {cfg.model.genrm} judges with the tiny task's prompt "
        f"{synthetic.JUDGE_TEMPLATE!r}, which asks for no verdict format; give it one with "
        "--reward.judge-template-file (configs/judges/ has one per paper judge family)"
    )
