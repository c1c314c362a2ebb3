"""DAPO's dynamic sampling in the RL flow (`train.filter_groups`; a mixin of
`pivot.runtime.flow.RLFlow`): a group whose rewards (or verifiable parts) are all equal carries
no gradient and is dropped, up to `filter_groups` a step; a step draws spare groups up front, as
many as the uniform share of recent groups says it will drop, and a fresh prompt's group is
rolled out only when those run short. Which groups a step trains is the buffer's rule (its
`keep` live groups of lowest id), never which finished first."""

from __future__ import annotations

from typing import Any

from pivot.rl.buffer import Key, SampleBuffer

_FADE = 0.98


class DynamicSampling:
    """Needs the flow's config, buffer, per-sample dicts and its sequence makers."""

    cfg: Any
    buffer: SampleBuffer
    verifiable: dict[Key, float]
    judgings: dict[Key, int]
    reward_extra: dict[Key, dict]
    # groups whose uniformity was decided, and the uniform ones among them, each fading by
    # `_FADE` per new group (about a step's worth): what spare groups a step draws up front
    _groups_seen: float
    _groups_uniform: float
    # and, from RLFlow: _next_prompts(n), rollout_seq(key), judge_seq(key, text, r_verifiable)

    def spare_groups(self) -> int:
        """Groups beyond the batch a step draws up front when dynamic sampling is on: as many as
        the uniform share u of recent groups says it will drop, B * u / (1 - u) (a prior of one
        uniform and one mixed group), within `train.filter_groups`. Drawn together, they
        generate side by side instead of one replacement after another behind the step's
        slowest group; the ones a step does not need are surplus (counted, never trained)."""
        limit = self.cfg.train.filter_groups
        if not limit:
            return 0
        u = (self._groups_uniform + 1) / (self._groups_seen + 2)
        return min(limit, round(self.cfg.train.batch_prompts * u / (1 - u)))

    def _saw_group(self, uniform: bool) -> None:
        self._groups_seen = _FADE * self._groups_seen + 1
        self._groups_uniform = _FADE * self._groups_uniform + uniform

    def _refill(self, key: Key) -> list[Any]:
        """DAPO's dynamic sampling (`train.filter_groups`): once `key`'s group has all its rewards
        and they (or their verifiable parts: `train.filter_metric`) are all equal, it is dropped
        while the step has drops left (`_replace`)."""
        step, prompt_id, _ = key
        rewards = self.buffer.group_rewards(step, prompt_id)
        if rewards is None:
            return []
        if self.cfg.train.filter_metric == "verifiable":
            rewards = [
                self.verifiable.get((step, prompt_id, g), 0.0)
                for g in range(self.buffer.group_size)
            ]
        uniform = min(rewards) == max(rewards)
        self._saw_group(uniform)
        if not uniform or self.buffer.replaced(step) >= self.cfg.train.filter_groups:
            return []
        return self._replace(step, prompt_id)

    def _replace(self, step: int, prompt_id: int) -> list[Any]:
        """Drop a uniform group; a fresh prompt's group takes its place when the step's
        remaining groups (spares included) fall short of its batch."""
        for g in range(self.buffer.group_size):
            self.verifiable.pop((step, prompt_id, g), None)
            self.judgings.pop((step, prompt_id, g), None)
            self.reward_extra.pop((step, prompt_id, g), None)
        self.buffer.drop_group(step, prompt_id)
        if self.buffer.live_groups(step) >= self.buffer.keep(step):
            return []
        keys = self.buffer.add_group(step, self._next_prompts(1)[0])
        return [self.rollout_seq(k) for k in keys]

    def _filters_before_judging(self) -> bool:
        """Dynamic sampling on the verifiable part decides a group's fate before any verdict: a
        group it drops is never judged (the GenRM's work on it would be thrown away)."""
        train = self.cfg.train
        return (
            bool(train.filter_groups)
            and train.filter_metric == "verifiable"
            and self.cfg.reward.w_genrm != 0
        )

    def _judge_group_once_verified(self, step: int, prompt_id: int) -> list[Any]:
        """Nothing until the group's G responses are all in; then the group is dropped and replaced
        if it is uniform and the step has replacements left, else its unrewarded samples are judged.
        Called for the group's last response (or once per group on restore), so each is judged once."""
        keys = [(step, prompt_id, g) for g in range(self.buffer.group_size)]
        samples = [self.buffer.sample(k) for k in keys]
        if any(s.response_ids is None for s in samples):
            return []
        uniform = len({self.verifiable.get(k, 0.0) for k in keys}) == 1
        self._saw_group(uniform)
        if uniform and self.buffer.replaced(step) < self.cfg.train.filter_groups:
            return self._replace(step, prompt_id)
        return [
            self.judge_seq(s.key, s.text, self.verifiable.get(s.key, 0.0))
            for s in samples
            if s.reward is None
        ]
