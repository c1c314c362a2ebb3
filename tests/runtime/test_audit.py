"""The run audit (pivot/runtime/records/audit.py) on hand-written records: a clean run passes, and each
kind of fault the soak must catch is caught and counted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from pivot.runtime.records.audit import exactly_once, figures, resumes, shift_up_weights

STEPS, B, G = 3, 2, 2


def write(run: Path, samples: list[dict], steps: list[int]) -> Path:
    run.mkdir(parents=True, exist_ok=True)
    (run / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in samples))
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s}) + "\n" for s in steps))
    return run


def clean_samples() -> list[dict]:
    return [
        {"step": s, "prompt": p, "sample": g, "judgings": 1}
        for s in range(1, STEPS + 1)  # the step trained, from 1, as metrics.jsonl numbers it
        for p in range(B)
        for g in range(G)
    ]


def test_a_clean_run_passes(tmp_path: Path) -> None:
    acc = exactly_once(write(tmp_path, clean_samples(), [1, 2, 3]), STEPS, B, G)
    assert (acc.lost, acc.duplicated, acc.misjudged, acc.violations) == (0, 0, 0, [])


def test_a_multi_turn_runs_episodes_are_counted_and_each_sample_must_be_one(tmp_path: Path) -> None:
    samples = [
        {**r, "turns": 1 + i % 2, "tool_calls": i % 2} for i, r in enumerate(clean_samples())
    ]
    acc = exactly_once(write(tmp_path / "clean", samples, [1, 2, 3]), STEPS, B, G)
    n = STEPS * B * G
    assert (acc.episodes, acc.turns, acc.tool_calls, acc.violations) == (n, n + n // 2, n // 2, [])
    del samples[0]["turns"]  # a sample of a multi-turn run without its episode's record
    samples[1]["turns"] = 0
    acc = exactly_once(write(tmp_path / "bad", samples, [1, 2, 3]), STEPS, B, G)
    assert acc.violations == [
        "1 samples of a multi-turn run without their episode, 1 episodes without a turn"
    ]


def test_lost_duplicated_misjudged_and_a_missing_step_are_counted(tmp_path: Path) -> None:
    samples = clean_samples()
    lost = samples.pop(3)
    samples.append(dict(samples[0]))  # trained twice
    samples.append({"step": 9, "prompt": 0, "sample": 0, "judgings": 1})  # not of this run
    samples[1]["judgings"] = 2
    samples[2]["judgings"] = 0
    acc = exactly_once(write(tmp_path, samples, [1, 3]), STEPS, B, G)
    assert (acc.lost, acc.duplicated, acc.misjudged) == (1, 2, 2)
    assert (
        len(acc.violations) == 4
        and str([(lost["step"], lost["prompt"], lost["sample"])]) in acc.violations[0]
    )


def shift(event: str, **kw: object) -> dict:
    return {"kind": "shift", "event": event, "time": 0.0, **kw}


def test_resumes_from_the_newest_checkpoint_without_gaps() -> None:
    good = [
        shift("checkpoint", step=1),
        shift("checkpoint", step=2),
        shift("resume", step=2),
        shift("checkpoint", step=3),
    ]
    assert resumes(good) == []
    older = [
        shift("checkpoint", step=1),
        shift("checkpoint", step=2),
        shift("resume", step=1),
        shift("checkpoint", step=2),
    ]
    assert resumes(older) == [
        "attempt 1 resumed from step 1, the newest committed checkpoint was 2"
    ]
    # killed between checkpoint 3's manifest and its row: resuming from 3 is right, from 4 is not
    unlogged = [shift("checkpoint", step=1), shift("checkpoint", step=2), shift("resume", step=3)]
    assert resumes(unlogged) == [] and len(resumes(unlogged[:2] + [shift("resume", step=4)])) == 1
    gap = [shift("checkpoint", step=1), shift("checkpoint", step=3)]
    assert len(resumes(gap)) == 1 and resumes(gap, every=2) == []


def folder(path: Path, value: float) -> Path:
    path.mkdir(parents=True)
    save_file({"w": torch.full((2, 3), value)}, str(path / "model.safetensors"))
    return path


def test_shift_up_checksums_against_the_version_they_report(tmp_path: Path) -> None:
    policy, genrm = folder(tmp_path / "policy", 1.0), folder(tmp_path / "genrm", 0.5)
    ckpt = tmp_path / "checkpoints"
    folder(ckpt / "step_000001" / "policy", 2.0)
    folder(ckpt / "step_000002" / "policy", 3.0)  # rewritten by the second attempt
    up = lambda role, v, total: shift("shift_up", role=role, slot=0, version=v, checksum=total)  # noqa: E731
    timeline = [
        up("rollout", 0, 6.0),
        up("reward", 0, 3.0),
        shift("checkpoint", step=1),
        up("rollout", 1, 12.0),
        up("rollout", 2, 99.0),  # version 2 of the killed attempt: never checkpointed by it
        shift("resume", step=1),
        up("rollout", 1, 12.0),
        shift("checkpoint", step=2),
        up("rollout", 2, 18.0),
        up("rollout", 2, 18.5),
        up("train", 2, 0.0),
    ]
    check = shift_up_weights(timeline, ckpt, policy, genrm)
    assert (check.verified, check.unverifiable) == (5, 1)
    assert len(check.mismatched) == 1 and "18.5" in check.mismatched[0]


def test_figures_add_up_over_attempts() -> None:
    timeline = [
        shift("plan", training=True),
        shift("shift_up"),
        shift("shift_down"),
        {"kind": "sample", "aborted": 3, "migrated": 2},
        {"kind": "sample", "aborted": 5, "migrated": 4},
        shift("resume", step=1),
        shift("plan"),
        shift("shift_up"),
        {"kind": "sample", "aborted": 1, "migrated": 0},
    ]
    f = figures(timeline)
    assert (
        f.plans,
        f.plans_mid_step,
        f.shifts_up,
        f.shifts_down,
        f.shifts,
        f.restarts,
        f.aborted,
        f.migrated,
    ) == (2, 1, 2, 1, 3, 1, 6, 4)


@pytest.mark.parametrize("name", ["samples.jsonl", "metrics.jsonl"])
def test_missing_records_lose_everything(tmp_path: Path, name: str) -> None:
    run = write(tmp_path, clean_samples(), [0, 1, 2])
    (run / name).unlink()
    assert exactly_once(run, STEPS, B, G).violations
