"""Start-up check of context limits with the real tokenizers (`pivot.model.context`).

The judge template's own length is measured as the run will build it: the template with an
empty question and response, inside the GenRM's chat template when `reward.chat_template` is on
and the folder has one. The question is bounded by `rollout.max_prompt_tokens` and the response
by `rollout.max_new_tokens`, a multi-turn episode's by `tools.max_episode_tokens`
(`PivotConfig.longest_response`; policy tokens, the GenRM's tokenizer may count a few more or
fewer).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from pivot.config import PivotConfig
from pivot.model import ModelArgs, TextTokenizer
from pivot.model.context import ContextNeed, context_needs
from pivot.rl.reward import judge_prompt
from pivot.tiny.task import judge_template


def judge_overhead(cfg: PivotConfig, genrm_path: Path) -> int:
    """Tokens of the judge prompt around the question and the response."""
    tok = TextTokenizer.from_pretrained(genrm_path)
    text = judge_prompt("", "", judge_template(cfg.reward))
    if cfg.reward.chat_template and tok.chat_template:
        return len(
            tok.apply_chat_template(
                [{"role": "user", "content": text}],
                add_generation_prompt=True,
                enable_thinking=cfg.reward.enable_thinking,
            )
        )
    return len(tok.encode(text))


def check_context(cfg: PivotConfig, policy_path: Path, genrm_path: Path) -> list[ContextNeed]:
    """Both roles' needs; raises ValueError (one line naming both numbers) when one overruns."""
    policy, genrm = ModelArgs.load(policy_path), ModelArgs.load(genrm_path)
    response, flag = cfg.longest_response()
    needs = context_needs(
        policy_path.name,
        policy.max_position_embeddings,
        genrm_path.name,
        genrm.max_position_embeddings,
        cfg.rollout.max_prompt_tokens,
        response,
        cfg.reward.max_new_tokens,
        judge_overhead(cfg, genrm_path),
        flag,
    )
    for need in needs:
        if need.problem:
            raise ValueError(need.problem)
    return list(needs)


def sized_to_roles(cfg: PivotConfig, needs: list[ContextNeed]) -> PivotConfig:
    """`cfg` with each role's `engine.max_seq_len` set to its longest sequence where it is 0 (the
    widest decode graph then covers the role's sequences, not the model's whole length)."""
    sections = {}
    for need in needs:
        section = getattr(cfg, need.role)
        if section.engine.max_seq_len == 0:
            engine = dataclasses.replace(section.engine, max_seq_len=min(need.total, need.limit))
            sections[need.role] = dataclasses.replace(section, engine=engine)
    return cfg.replace(**sections) if sections else cfg
