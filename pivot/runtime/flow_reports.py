"""What the RL flow hands the trainer and the logs (a mixin of `pivot.runtime.flow.RLFlow`): a
step's samples as a training batch with GRPO advantages, what they say about the policy that
made them, one record per sample (samples.jsonl), and the flow's counters."""

from __future__ import annotations

from typing import Any

from pivot.rl.batch import TrainBatch, batch_from_groups
from pivot.rl.buffer import Key, SampleBuffer
from pivot.rl.plugins import accuracy, extra_means


class FlowReports:
    """Needs the flow's buffer, per-sample dicts, tallies, stats, scorer, verifier and cursor."""

    buffer: SampleBuffer
    verifiable: dict[Key, float]
    judgings: dict[Key, int]
    reward_extra: dict[Key, dict]
    sampled: dict[int, list[float]]
    stats: Any
    scorer: Any
    verify: Any
    cursor: Any
    policy_tok: Any

    def batch(self, step: int) -> tuple[TrainBatch, dict[str, float], list[dict]]:
        """Step `step`'s B x G samples as a training batch with GRPO advantages, what they say
        about the policy that made them, and one record per sample (samples.jsonl)."""
        groups = self.buffer.take_batch(step)
        flat = [s for g in groups for s in g]
        n = max(len(flat), 1)
        right, total = self.sampled.pop(step, [0.0, 0.0])  # dropped groups' rollouts included
        records = [
            {
                "step": s.step,
                "prompt": s.prompt_id,
                "sample": s.sample_idx,
                "prompt_row": s.prompt.id,
                "version": s.version,
                "reward": s.reward,
                "verifiable": self.verifiable.get(s.key, 0.0),
                "judgings": self.judgings.pop(s.key, 0),
                "response_tokens": len(s.response_ids or ()),
                "response": s.text,
            }
            | ({"reward_extra": self.reward_extra[s.key]} if s.key in self.reward_extra else {})
            for s in flat
        ]
        summary = {
            "reward/mean": sum(s.reward or 0.0 for s in flat) / n,
            "reward/accuracy": sum(
                accuracy(self.verifiable.pop(s.key, 0.0), self.reward_extra.get(s.key, {}))
                for s in flat
            )
            / n,
            "rollout/accuracy_sampled": right / max(total, 1.0),
            "rollout/response_len": sum(len(s.response_ids or ()) for s in flat) / n,
            "rollout/staleness": sum(step - s.version for s in flat) / n,
            **extra_means([self.reward_extra.pop(s.key, {}) for s in flat]),
        }
        for per_key in (self.verifiable, self.judgings, self.reward_extra):  # surplus groups'
            for k in [k for k in per_key if k[0] == step]:
                del per_key[k]
        return batch_from_groups(groups, self.policy_tok.encode), summary, records

    def metrics(self) -> dict[str, float]:
        st, buf = self.stats, self.buffer.stats
        return {
            "tokens/rollout": st.tokens_rollout,
            "tokens/reward": st.tokens_reward,
            "count/duplicates_dropped": st.duplicates_dropped + buf.duplicates_dropped,
            "count/groups_dropped": buf.groups_dropped,
            "count/groups_surplus": buf.groups_surplus,
            "count/surplus_outputs": buf.surplus_outputs,
            "count/stale_regenerated": st.stale_regenerated,
            "count/aborted": st.aborted,
            "count/migrated": st.migrated,
            "count/unparsable_verdicts": self.scorer.stats.unparsable_verdicts,
            "count/verifier_errors": self.verify.errors,
            "count/prompts_skipped_too_long": st.prompts_skipped_too_long,
            "count/bad_rows_skipped": self.cursor.dataset.stats.skipped,
            "reward/genrm_mean": st.genrm_sum / max(st.rewards_finished, 1),
        }
