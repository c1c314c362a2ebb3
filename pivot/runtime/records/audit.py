"""Checks a finished run against its own records (metrics.jsonl, samples.jsonl, timeline.jsonl,
checkpoints), across restarts: what tests and `tools/soak.py` assert.

A run killed and restarted is a sequence of *attempts* in one timeline: each restarted attempt
begins with a `resume` row (the step of the checkpoint it continued from). Rows of steps after
that checkpoint were removed from metrics.jsonl and samples.jsonl by the resumed attempt, so
those two files hold exactly the lineage that produced the final policy.

- `exactly_once`: every prompt of every step has exactly G samples, each trained once and
  judged once; metrics has one row per step, in order. A multi-turn run's sample is one episode
  (`tools.config`): each trained one is counted with its turns and tool calls, and one without
  its episode's record, or with no turn, is a violation.
- `resumes`: every attempt resumed from the newest checkpoint any attempt before it committed,
  and each attempt's checkpoints follow on from there without a gap.
- `shift_up_weights`: a shift up's checksum (`--log.verify-weights`) equals the checksum of the
  model version it reports: the GenRM folder, the initial policy (version 0) or the policy of the
  checkpoint of that step. A policy version whose checkpoint the same attempt did not write (or
  resume from) died with a killed attempt: its weights exist nowhere any more, so the shift up
  is counted as unverifiable instead (`--checkpoint.every 1` keeps these to the tail of each
  killed attempt).
- `figures`: what happened: plans, replica shifts, restarts, sequences aborted and migrated.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pivot.runtime.records.metrics import read_rows

Row = dict[str, Any]


def attempts(timeline: list[Row]) -> list[list[Row]]:
    """The timeline's shift rows split into attempts (a `resume` row opens a new one)."""
    out: list[list[Row]] = [[]]
    for row in timeline:
        if row.get("event") == "resume":
            out.append([])
        out[-1].append(row)
    return out


@dataclass
class Accounting:
    lost: int = 0
    """(step, prompt, sample) keys never trained."""
    duplicated: int = 0
    """Extra trainings of a key, plus keys that do not belong to the run."""
    misjudged: int = 0
    """Trained samples judged other than exactly once."""
    episodes: int = 0
    """Trained samples that were multi-turn episodes, their turns and their tool calls."""
    turns: int = 0
    tool_calls: int = 0
    violations: list[str] = field(default_factory=list)


def exactly_once(run_dir: Path, steps: int, prompts: int, group: int) -> Accounting:
    acc = Accounting()
    samples = read_rows(run_dir / "samples.jsonl")
    keys = Counter((r["step"], r["prompt"], r["sample"]) for r in samples)
    foreign = {k for k in keys if not (1 <= k[0] <= steps and 0 <= k[2] < group)}
    # a step trains `prompts` whole groups; which prompt ids they have depends on the groups that
    # dynamic sampling (train.filter_groups) replaced
    groups: dict[tuple[int, int], set[int]] = {}
    for k in set(keys) - foreign:
        groups.setdefault(k[:2], set()).add(k[2])
    per_step = Counter(s for s, _ in groups)
    missing = [(s, p, g) for (s, p), got in groups.items() for g in range(group) if g not in got]
    missing += [
        (s, -1, -1)
        for s in range(1, steps + 1)
        for _ in range(max(0, prompts - per_step[s]))
        for _ in range(group)
    ]
    acc.lost = len(missing)
    acc.duplicated = (
        sum(n - 1 for n in keys.values())
        + sum(keys[k] for k in foreign)
        + group * sum(max(0, per_step[s] - prompts) for s in range(1, steps + 1))
    )
    acc.misjudged = sum(1 for r in samples if r["judgings"] != 1)
    if acc.lost:
        acc.violations.append(
            f"{acc.lost} samples never trained (step, prompt, sample; -1: a whole group), e.g. {sorted(missing)[:3]}"
        )
    if acc.duplicated:
        acc.violations.append(f"{acc.duplicated} samples trained twice or not of this run")
    if acc.misjudged:
        bad = [
            (r["step"], r["prompt"], r["sample"], r["judgings"])
            for r in samples
            if r["judgings"] != 1
        ]
        acc.violations.append(
            f"{acc.misjudged} samples judged other than once (step, prompt, sample, judgings): {bad[:3]}"
        )
    episodes = [r for r in samples if "turns" in r]
    acc.episodes = len(episodes)
    acc.turns = sum(r["turns"] for r in episodes)
    acc.tool_calls = sum(r["tool_calls"] for r in episodes)
    if episodes and (len(episodes) != len(samples) or any(r["turns"] < 1 for r in episodes)):
        acc.violations.append(
            f"{len(samples) - len(episodes)} samples of a multi-turn run without their episode, "
            f"{sum(r['turns'] < 1 for r in episodes)} episodes without a turn"
        )
    logged = [r["step"] for r in read_rows(run_dir / "metrics.jsonl")]
    if logged != list(range(1, steps + 1)):
        acc.violations.append(f"metrics.jsonl steps are not 1..{steps} in order: {logged[:10]}...")
    return acc


def resumes(timeline: list[Row], every: int = 1) -> list[str]:
    """Each attempt starts at the newest committed checkpoint and commits the steps after it in
    ascending order, none twice, never more than `every` steps apart (`--checkpoint.every`).
    The controller logs a checkpoint right after its manifest lands, so a kill between the two
    leaves one complete checkpoint without its row: a resume from the next due step is right."""
    out: list[str] = []
    committed: list[int] = []
    for i, rows in enumerate(attempts(timeline)):
        start = rows[0]["step"] if rows and rows[0].get("event") == "resume" else 0
        newest = max(committed, default=0)
        if i > 0 and not newest <= start <= newest + every:
            out.append(
                f"attempt {i} resumed from step {start}, the newest committed checkpoint was {newest}"
            )
        steps = [r["step"] for r in rows if r.get("event") == "checkpoint"]
        if any(b - a not in range(1, every + 1) for a, b in zip([start, *steps], steps)):
            out.append(
                f"attempt {i} (from step {start}) committed checkpoints {steps}: a gap or out of order"
            )
        committed += steps
    return out


def model_checksum(folder: Path) -> float:
    """The sum of every weight in float64, as a shift up reports it (`--log.verify-weights`)."""
    from safetensors.torch import load_file

    return sum(
        float(t.double().sum())
        for f in sorted(folder.glob("*.safetensors"))
        for t in load_file(str(f)).values()
    )


@dataclass
class WeightCheck:
    verified: int = 0
    unverifiable: int = 0
    """Shift ups of a policy version whose only copy died with a killed attempt."""
    mismatched: list[str] = field(default_factory=list)


def shift_up_weights(
    timeline: list[Row], checkpoints: Path, policy: Path, genrm: Path
) -> WeightCheck:
    out = WeightCheck()
    sums: dict[Path, float] = {}

    def expected(folder: Path) -> float:
        if folder not in sums:
            sums[folder] = model_checksum(folder)
        return sums[folder]

    for rows in attempts(timeline):
        own = {r["step"] for r in rows if r.get("event") in ("checkpoint", "resume")}
        for e in rows:
            if e.get("event") != "shift_up" or e["role"] == "train":
                continue
            v = e["version"]
            if e["role"] == "reward":
                folder = genrm
            elif v == 0:
                folder = policy
            elif v in own:
                folder = checkpoints / f"step_{v:06d}" / "policy"
            else:
                out.unverifiable += 1
                continue
            want = expected(folder)
            if not math.isclose(e["checksum"], want, rel_tol=1e-9, abs_tol=1e-6):
                out.mismatched.append(
                    f"{e['role']}{e['slot']} at t={e['time']} reports version {v}, checksum "
                    f"{e['checksum']!r}; {folder} has {want!r}"
                )
            else:
                out.verified += 1
    return out


@dataclass
class Figures:
    plans: int = 0
    """Shift plans the planner issued."""
    plans_mid_step: int = 0
    """Of those, the ones issued while a training step ran."""
    shifts_up: int = 0
    shifts_down: int = 0
    restarts: int = 0
    """Attempts that resumed from a checkpoint."""
    aborted: int = 0
    """Sequences aborted by a shift (down, or migration after a shift up), over every attempt."""
    migrated: int = 0
    """Of those, the ones resumed elsewhere from the tokens they had generated."""

    @property
    def shifts(self) -> int:
        return self.shifts_up + self.shifts_down


def figures(timeline: list[Row]) -> Figures:
    out = Figures()
    for rows in attempts(timeline):
        events = Counter(r.get("event") for r in rows)
        out.plans += events["plan"]
        out.plans_mid_step += sum(1 for r in rows if r.get("event") == "plan" and r.get("training"))
        out.shifts_up += events["shift_up"]
        out.shifts_down += events["shift_down"]
        out.restarts += events["resume"]
        # counters restart with each attempt; the newest sample row of an attempt has its total
        out.aborted += max((r.get("aborted", 0) for r in rows), default=0)
        out.migrated += max((r.get("migrated", 0) for r in rows), default=0)
    return out
