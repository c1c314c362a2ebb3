"""What the RL flow hands the trainer and the logs (`RLFlow.batch` and `RLFlow.metrics` in
pivot/runtime/flow/rl_flow.py pass in what each needs): a step's samples as a training batch with GRPO
advantages, what they say about the policy that made them, one record per sample
(samples.jsonl) (`step_batch`), and the flow's counters (`FlowStats`, `flow_metrics`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from pivot.rl.batch import TrainBatch, batch_from_groups
from pivot.rl.buffer import BufferStats, Key, Sample, SampleBuffer
from pivot.rl.plugins import accuracy, extra_means
from pivot.rl.reward import RewardStats
from pivot.runtime.flow.episodes import EpisodeCounts


@dataclass
class FlowStats:
    prompts_skipped_too_long: int = 0
    rollouts_finished: int = 0
    rewards_finished: int = 0
    tokens_rollout: int = 0
    tokens_reward: int = 0
    # outputs of sequences that had already finished (the buffer counts its own)
    duplicates_dropped: int = 0
    stale_regenerated: int = 0
    genrm_sum: float = 0.0
    aborted: int = 0  # sequences aborted (shift down or migration) and returned to the queue
    migrated: int = 0  # of those, the ones that carried generated tokens to resume from elsewhere


def step_batch(
    step: int,
    buffer: SampleBuffer,
    verifiable: dict[Key, float],
    judgings: dict[Key, int],
    reward_extra: dict[Key, dict],
    sampled: dict[int, list[float]],
    judge_outputs: dict[Key, tuple[str, float]],
    encode: Callable[[str], list[int]],
) -> tuple[TrainBatch, dict[str, float], list[dict]]:
    """Step `step`'s B x G samples, taken from `buffer`, as a training batch with GRPO advantages
    (`encode`: the policy's tokenizer), what they say about the policy that made them, and one
    record per sample (samples.jsonl: its prompt, ground truth, response, the judge's output and
    the score parsed from it, beside the rewards). The per-sample notes (`verifiable`,
    `judgings`, `reward_extra`, `judge_outputs`) and the step's tally of every rollout
    (`sampled`: [right, responses]) are used up: the step's entries are removed, its surplus
    groups' too."""
    groups = buffer.take_batch(step)
    flat = [s for g in groups for s in g]
    n = max(len(flat), 1)
    right, total = sampled.pop(step, [0.0, 0.0])  # dropped groups' rollouts included
    records = [
        {
            "step": s.step + 1,  # the step that trained it, as metrics.jsonl numbers it (from 1)
            "prompt": s.prompt_id,
            "sample": s.sample_idx,
            "prompt_row": s.prompt.id,
            "version": s.version,
            "reward": s.reward,
            "verifiable": verifiable.get(s.key, 0.0),
            "judgings": judgings.pop(s.key, 0),
            "response_tokens": len(s.response_ids or ()),
            **(
                {"turns": s.turns, "tool_calls": s.tool_calls}
                if s.response_mask is not None
                else {}
            ),
            "prompt_text": s.prompt.text,
            "ground_truth": s.prompt.ground_truth,
            "response": s.text,
            **_judged(judge_outputs.pop(s.key, None)),
        }
        | ({"reward_extra": reward_extra[s.key]} if s.key in reward_extra else {})
        for s in flat
    ]
    summary = {
        "reward/mean": sum(s.reward or 0.0 for s in flat) / n,
        "reward/accuracy": sum(
            accuracy(verifiable.pop(s.key, 0.0), reward_extra.get(s.key, {})) for s in flat
        )
        / n,
        "rollout/accuracy_sampled": right / max(total, 1.0),
        "rollout/response_len": sum(len(s.response_ids or ()) for s in flat) / n,
        "rollout/staleness": sum(step - s.version for s in flat) / n,
        **(_episode_means(flat, n) if any(s.response_mask is not None for s in flat) else {}),
        **extra_means([reward_extra.pop(s.key, {}) for s in flat]),
    }
    for per_key in (verifiable, judgings, reward_extra, judge_outputs):  # surplus groups'
        for k in [k for k in per_key if k[0] == step]:
            del per_key[k]
    return batch_from_groups(groups, encode), summary, records


def _episode_means(flat: list[Sample], n: int) -> dict[str, float]:
    """A multi-turn step's episodes: turns, tool calls and failed calls per episode, and the
    share of response tokens the policy made (the rest are tools' responses, not trained on)."""
    tokens = sum(len(s.response_ids or ()) for s in flat)
    policy = sum(
        sum(s.response_mask) if s.response_mask is not None else len(s.response_ids or ())
        for s in flat
    )
    return {
        "rollout/turns": sum(s.turns for s in flat) / n,
        "rollout/tool_calls": sum(s.tool_calls for s in flat) / n,
        "rollout/tool_errors": sum(s.tool_errors for s in flat) / n,
        "rollout/policy_token_share": policy / max(tokens, 1),
    }


def _judged(output: tuple[str, float] | None) -> dict:
    """The judge's words and the score parsed from them (None: judged before a restart, or not
    judged: a reward from the verifier alone)."""
    text, score = output if output is not None else (None, None)
    return {"judge_output": text, "judge_score": score}


def flow_metrics(
    st: FlowStats,
    buf: BufferStats,
    verdicts: RewardStats,
    verifier_errors: int,
    bad_rows_skipped: int,
    episodes: EpisodeCounts | None = None,
) -> dict[str, float]:
    """The flow's counters (`st`), its buffer's (`buf`), the GenRM scorer's, the verifier's and
    the dataset's, as the run's metrics name them."""
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
        "count/unparsable_verdicts": verdicts.unparsable_verdicts,
        "count/verdict_retries": verdicts.verdict_retries,
        "count/judge_timeouts": verdicts.judge_timeouts,
        "count/verifier_errors": verifier_errors,
        "count/prompts_skipped_too_long": st.prompts_skipped_too_long,
        "count/bad_rows_skipped": bad_rows_skipped,
        "reward/genrm_mean": st.genrm_sum / max(st.rewards_finished, 1),
    } | (_episode_counts(episodes) if episodes is not None else {})


def _episode_counts(c: EpisodeCounts) -> dict[str, float]:
    return {
        "count/episodes": c.episodes,
        "count/turns": c.turns,
        "count/tool_calls": c.tool_calls,
        "count/tool_errors": c.tool_errors,
        "count/episodes_truncated": c.truncated,
    }
