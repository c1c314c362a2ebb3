"""Context limits: what a role's longest sequence needs against its model's max_position_embeddings.

Pure arithmetic, shared by the start-up check (`pivot.memory.context_check`, real tokenizers)
and `--dry-run` (`pivot.memory.report`). A rollout sequence is the longest prompt the data
filter lets through (`rollout.max_prompt_tokens`) plus `rollout.max_new_tokens`. A judge
sequence is the judge prompt, which must hold the template, the question and the longest
response the policy may write, plus `reward.max_new_tokens`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ContextNeed:
    """One role's longest sequence and its model's limit."""

    role: str
    model: str
    limit: int
    """The model's max_position_embeddings."""
    prompt: int
    """Tokens of the longest prompt."""
    prompt_parts: str
    """How `prompt` is made up, for the message."""
    new_tokens: int
    new_field: str

    @property
    def total(self) -> int:
        return self.prompt + self.new_tokens

    @property
    def problem(self) -> str | None:
        if self.total <= self.limit:
            return None
        return (
            f"{self.role}: longest prompt {self.prompt} ({self.prompt_parts}) + {self.new_field}={self.new_tokens} "
            f"= {self.total} tokens exceed {self.model}'s max_position_embeddings={self.limit}"
        )


def context_needs(
    policy: str,
    policy_limit: int,
    genrm: str,
    genrm_limit: int,
    max_prompt_tokens: int,
    rollout_new: int,
    reward_new: int,
    judge_overhead: int,
    rollout_new_flag: str = "rollout.max_new_tokens",
) -> tuple[ContextNeed, ContextNeed]:
    """The rollout's and the reward's needs; `judge_overhead` = tokens of the judge prompt with an
    empty question and response (the template, inside the GenRM's chat template when used);
    `rollout_new_flag` the flag bounding a response (a multi-turn episode's: tools.max_episode_tokens)."""
    rollout = ContextNeed(
        "rollout",
        policy,
        policy_limit,
        max_prompt_tokens,
        "rollout.max_prompt_tokens",
        rollout_new,
        rollout_new_flag,
    )
    judge = judge_overhead + max_prompt_tokens + rollout_new
    reward = ContextNeed(
        "reward",
        genrm,
        genrm_limit,
        judge,
        f"judge template {judge_overhead} + question {max_prompt_tokens} + response {rollout_new}",
        reward_new,
        "reward.max_new_tokens",
    )
    return rollout, reward
