"""What an emulated run did, in emulated time, read back from its run folder (metrics.jsonl,
timeline.jsonl and each rank's device-time tally): the figures tools/bench_e2e.py --emulated
sets beside the simulator's."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pivot.emulate.clock import WorkTally
from pivot.runtime.records.metrics import read_jsonl


@dataclass(frozen=True)
class EmulatedRun:
    emulated_s: float
    """Emulated seconds from the first plan (roles coming up) to the end of the last step."""
    real_tokens: int
    """Tokens the run processed (rollout and GenRM, prompt + response), real."""
    plans: int
    """Plans executed after the initial one."""
    steps: int
    device_s: dict[str, float]
    """Emulated device-seconds of each kind of work: rollout, reward, train, shift."""
    compute_share: float
    """Real compute / wall window of all emulated work (small: the devices are emulated faithfully)."""
    overrun_s: float
    """Wall seconds compute ran past a deadline, over all ranks."""
    train_overrun_s: float
    """Emulated seconds the training slot's real compute ran past its steps' windows (its ranks
    step together, so this is what the slot, and every role waiting for the step, lost)."""
    prefill_tokens: int
    """Real tokens the engines prefilled (re-prefills included)."""
    prefix_hit_tokens: int
    """Real prompt tokens the engines reused from shared prefixes."""
    reprefill_tokens: int = 0
    """Of the prefilled tokens, those computed again (resumed without their KV, or preempted)."""
    kv_imported_tokens: int = 0
    """Real tokens whose KV migrated with their sequence (not re-prefilled)."""
    kv_fallback_tokens: int = 0
    """Real tokens of migrated KV that a replica could not take (re-prefilled)."""


def measure(run_dir: str | Path, time_scale: float, tallies: dict[str, WorkTally]) -> EmulatedRun:
    run = Path(run_dir)
    train_ranks = sum('"train"' in f.read_text() for f in (run / "emulated").glob("rank_*.json"))
    train = tallies.get("train", WorkTally())
    metrics = read_jsonl(run / "metrics.jsonl")
    plans = [
        r
        for r in read_jsonl(run / "timeline.jsonl")
        if r.get("kind") == "shift" and r.get("event") == "plan"
    ]
    start, end = plans[0]["time"], metrics[-1]["time"]
    last = metrics[-1]
    compute = sum(t.compute_s for t in tallies.values())
    window = sum(t.compute_s + t.waited_s for t in tallies.values())
    return EmulatedRun(
        emulated_s=(end - start) / time_scale,
        real_tokens=int(last["tokens/rollout"] + last["tokens/reward"]),
        plans=len(plans) - 1,
        steps=len(metrics),
        device_s={k: t.device_s for k, t in tallies.items()},
        compute_share=compute / max(window, 1e-9),
        overrun_s=sum(t.overrun_s for t in tallies.values()),
        train_overrun_s=train.overrun_s / max(train_ranks, 1) / time_scale,
        prefill_tokens=sum(t.prefill_tokens for t in tallies.values()),
        prefix_hit_tokens=sum(t.prefix_hit_tokens for t in tallies.values()),
        reprefill_tokens=sum(t.reprefill_tokens for t in tallies.values()),
        kv_imported_tokens=sum(t.kv_imported_tokens for t in tallies.values()),
        kv_fallback_tokens=sum(t.kv_fallback_tokens for t in tallies.values()),
    )
