"""DAPO's dynamic sampling in the RL flow (`train.filter_groups`; `DynamicSampling`, a part that
`pivot.runtime.flow.rl_flow.RLFlow` holds): a group whose rewards (or verifiable parts) are all equal
carries no gradient and is dropped, up to `filter_groups` a step; a step draws spare groups up
front, as many as the uniform share of recent groups says it will drop, and a fresh prompt's group
is rolled out only when those run short. Which groups a step trains is the buffer's rule (its
`keep` live groups of lowest id), never which finished first.

The part decides; the flow acts on its answer (forgets the group's per-sample notes, drops it
from the buffer, rolls out a fresh prompt's group or judges the kept one)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from pivot.config import TrainConfig
from pivot.rl.buffer import Key, SampleBuffer

_FADE = 0.98


@dataclass
class DynamicSampling:
    train: TrainConfig
    judged: bool  # a GenRM verdict is part of the reward (`reward.w_genrm != 0`)
    buffer: SampleBuffer  # the flow's: what a group's samples hold, what a step dropped
    # groups whose uniformity was decided, and the uniform ones among them, each fading by
    # `_FADE` per new group (about a step's worth): what spare groups a step draws up front
    groups_seen: float = 0.0
    groups_uniform: float = 0.0

    def spare_groups(self) -> int:
        """Groups beyond the batch a step draws up front when dynamic sampling is on: as many as
        the uniform share u of recent groups says it will drop, B * u / (1 - u) (a prior of one
        uniform and one mixed group), within `train.filter_groups`. Drawn together, they
        generate side by side instead of one replacement after another behind the step's
        slowest group; the ones a step does not need are surplus (counted, never trained)."""
        limit = self.train.filter_groups
        if not limit:
            return 0
        u = (self.groups_uniform + 1) / (self.groups_seen + 2)
        return min(limit, round(self.train.batch_prompts * u / (1 - u)))

    def saw_group(self, uniform: bool) -> None:
        self.groups_seen = _FADE * self.groups_seen + 1
        self.groups_uniform = _FADE * self.groups_uniform + uniform

    def filters_before_judging(self) -> bool:
        """Dynamic sampling on the verifiable part decides a group's fate before any verdict: a
        group it drops is never judged (the GenRM's work on it would be thrown away)."""
        return (
            bool(self.train.filter_groups)
            and self.train.filter_metric == "verifiable"
            and self.judged
        )

    def drops_rewarded(self, step: int, prompt_id: int, verifiable: Mapping[Key, float]) -> bool:
        """Once the group of (`step`, `prompt_id`) has all its rewards: whether they (or their
        verifiable parts: `train.filter_metric`) are all equal while the step has drops left.
        False while a reward is missing (the group is not counted yet)."""
        if not self.train.filter_groups:
            return False
        rewards = self.buffer.group_rewards(step, prompt_id)
        if rewards is None:
            return False
        if self.train.filter_metric == "verifiable":
            rewards = [
                verifiable.get((step, prompt_id, g), 0.0) for g in range(self.buffer.group_size)
            ]
        return self.drops(step, rewards)

    def drops(self, step: int, scores: list[float]) -> bool:
        """A group whose fate is due, scored by `scores` (every sample's): counted, and dropped
        when they are all equal while `step` has drops left."""
        uniform = min(scores) == max(scores)
        self.saw_group(uniform)
        return uniform and self.buffer.replaced(step) < self.train.filter_groups
