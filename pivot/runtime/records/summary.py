"""What rank 0 prints when the main job ends: what ran, how fast, what was learned, where it all is.

Read back from the run folder's records (metrics.jsonl, eval.jsonl, timeline.jsonl), so the
summary says exactly what the files say."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from pivot.rl.evaluation import LEARNED_SE, learned
from pivot.runtime.records.metrics import read_rows


def run_summary(
    run_dir: str | Path, checkpoint_dir: str | Path, status: str, extra: list[str] | None = None
) -> str:
    """`extra`: the device backend's lines (pivot/runtime/job/backend.py), after the shifts."""
    run = Path(run_dir)
    metrics = read_rows(run / "metrics.jsonl")
    evals = read_rows(run / "eval.jsonl")
    timeline = read_rows(run / "timeline.jsonl")
    lines = [f"pivot: {status}"]
    if metrics:
        first, last = metrics[0], metrics[-1]
        start = first["time"] - first.get("time/step_s", 0.0)
        seconds = max(last["time"] - start, 1e-9)
        tokens = last.get("tokens/rollout", 0) + last.get("tokens/reward", 0)
        lines.append(
            f"  steps {first['step']}..{last['step']} ({len(metrics)} trained) in {seconds:.0f} s: "
            f"{tokens / seconds:,.0f} tokens/s (rollout + GenRM, prompt + response)"
        )
        # one step's batch is 8-16 prompts: its reward swings more than a run moves it
        k = max(1, min(10, len(metrics) // 4))
        head, tail = metrics[:k], metrics[-k:]
        over = f" (means of the first and last {k} steps)" if k > 1 else ""
        lines.append(
            f"  batch reward {_mean(head, 'reward/mean'):.3f} -> {_mean(tail, 'reward/mean'):.3f}, "
            f"batch accuracy {_mean(head, 'reward/accuracy'):.3f} -> {_mean(tail, 'reward/accuracy'):.3f}{over}"
        )
        if "rollout/accuracy_sampled" in last:
            # dynamic sampling keeps mixed groups only, which pins the batch's accuracy near 0.5
            lines.append(
                "  sampled accuracy (every rollout, before dynamic sampling) "
                f"{_mean(head, 'rollout/accuracy_sampled'):.3f}"
                f" -> {_mean(tail, 'rollout/accuracy_sampled'):.3f}"
            )
        if "count/tool_calls" in last:  # a multi-turn run (tools.config)
            lines.append(
                f"  tool calls per episode {_mean(head, 'rollout/tool_calls'):.2f} -> "
                f"{_mean(tail, 'rollout/tool_calls'):.2f}, turns {_mean(head, 'rollout/turns'):.2f}"
                f" -> {_mean(tail, 'rollout/turns'):.2f}; {last['count/tool_errors']:,} of "
                f"{last['count/tool_calls']:,} calls failed, {last['count/episodes_truncated']:,} of "
                f"{last['count/episodes']:,} episodes ended at a limit"
            )
    if evals:
        lines.append(
            f"  held-out accuracy (greedy, {evals[-1]['prompts']} prompts) "
            f"{evals[0]['accuracy']:.3f} at step {evals[0]['step']} -> "
            f"{evals[-1]['accuracy']:.3f} at step {evals[-1]['step']}"
            + _verdict(evals[0].get("scores", []), evals[-1].get("scores", []))
        )
    ups = Counter(
        r["role"] for r in timeline if r.get("kind") == "shift" and r.get("event") == "shift_up"
    )
    downs = Counter(
        r["role"] for r in timeline if r.get("kind") == "shift" and r.get("event") == "shift_down"
    )
    if ups or downs:
        per_role = ", ".join(
            f"{role} +{ups[role]}/-{downs[role]}" for role in ("rollout", "reward", "train")
        )
        lines.append(f"  shifts (up/down): {per_role}")
    lines += _recoveries(timeline)
    lines += _sizing(timeline)
    lines += extra or []
    lines += [
        f"  records:     {run}/metrics.jsonl, eval.jsonl, samples.jsonl, timeline.jsonl"
        + (f", tb/ (tensorboard --logdir {run}/tb)" if (run / "tb").is_dir() else ""),
        f"  checkpoints: {checkpoint_dir}",
        f"  timeline plot: python tools/plot_timeline.py {run}/timeline.jsonl",
    ]
    return "\n".join(lines)


def _recoveries(timeline: list[dict]) -> list[str]:
    """A line on the engines that failed and came back, and one on the training steps split to
    fit device memory (docs/reliability.md), for those that happened."""
    events = Counter(r.get("event") for r in timeline if r.get("kind") == "shift")
    lines = []
    if events["engine_failed"]:
        took = [r["recover_s"] for r in timeline if r.get("event") == "engine_rebuilt"]
        back = f", longest {max(took):.1f} s from failure to serving" if took else ""
        out = f"  engine failures: {events['engine_failed']}, rebuilt {len(took)}{back}"
        if events["replica_retired"]:
            out += f"; {events['replica_retired']} replica(s) stay down"
        lines.append(out)
    if splits := [r for r in timeline if r.get("event") == "train_split"]:
        lines.append(
            f"  training steps split to fit device memory: {len(splits)}, "
            f"micro-batches now at most {splits[-1]['micro_batch_tokens']} tokens"
        )
    return lines


def _sizing(timeline: list[dict]) -> list[str]:
    """A line on the training slot's sizing by measurement (pivot/runtime/control/sizing.py):
    how many searches finished and each re-size, with the step it followed."""
    sizings = [r for r in timeline if r.get("event") == "train_sizing"]
    if not sizings:
        return []
    moves = [
        f"{r['was']} -> {r['devices']} after step {r['step']}"
        for r in timeline
        if r.get("event") == "train_resized"
    ]
    slot = f"re-sized {', '.join(moves)}" if moves else f"kept at {sizings[0]['devices']} devices"
    cpu = max(r["cpu_s"] for r in sizings)
    lines = [f"  training slot sized {len(sizings)} time(s) ({cpu:.1f} CPU-s at most): {slot}"]
    if advice := sizings[-1].get("next_launch"):  # it landed after the last step
        lines.append(f"  the last sizing, as the run ended, picked {sizings[-1]['pick']}: {advice}")
    return lines


def _mean(rows: list[dict], key: str) -> float:
    return sum(r.get(key, 0.0) for r in rows) / len(rows)


def _verdict(before: list[float], after: list[float]) -> str:
    """Whether the held-out gain stands out of its noise: the same prompts compared one by one."""
    if len(before) != len(after) or len(before) < 2:
        return ""
    gain, se, ok = learned(before, after)
    if se == 0:
        return f": {gain:+.3f}"
    z = gain / se
    word = (
        "learned"
        if ok
        else f"gained, within {LEARNED_SE:g} standard errors"
        if z > 0
        else "no gain"
    )
    return f": {gain:+.3f} +/- {se:.3f} (paired standard error; {z:+.1f} SE): {word}"
