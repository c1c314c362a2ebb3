"""The end-of-run summary reads the run folder's records back (pivot/runtime/records/summary.py)."""

from __future__ import annotations

import json
from pathlib import Path

from pivot.runtime.records.summary import run_summary


def _write(path: Path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_summary_of_a_run(tmp_path: Path) -> None:
    _write(
        tmp_path / "metrics.jsonl",
        [
            {
                "step": 1,
                "time": 2.0,
                "time/step_s": 2.0,
                "tokens/rollout": 100,
                "tokens/reward": 50,
                "reward/mean": 0.5,
                "reward/accuracy": 0.25,
            },
            {
                "step": 2,
                "time": 10.0,
                "time/step_s": 8.0,
                "tokens/rollout": 300,
                "tokens/reward": 100,
                "reward/mean": 1.0,
                "reward/accuracy": 0.5,
            },
        ],
    )
    _write(
        tmp_path / "eval.jsonl",
        [{"step": 0, "accuracy": 0.2, "prompts": 8}, {"step": 2, "accuracy": 0.4, "prompts": 8}],
    )
    _write(
        tmp_path / "timeline.jsonl",
        [
            {"kind": "shift", "event": "shift_up", "role": "rollout"},
            {"kind": "shift", "event": "shift_up", "role": "train"},
            {"kind": "shift", "event": "shift_down", "role": "rollout"},
            {"kind": "sample", "devices": {}},
        ],
    )
    text = run_summary(tmp_path, tmp_path / "checkpoints", "done")
    assert text.splitlines()[0] == "pivot: done"
    assert "steps 1..2 (2 trained) in 10 s: 40 tokens/s" in text  # 400 tokens from t=0 to t=10
    assert "batch reward 0.500 -> 1.000, batch accuracy 0.250 -> 0.500" in text
    assert "0.200 at step 0 -> 0.400 at step 2" in text
    assert "rollout +1/-1, reward +0/-0, train +1/-0" in text
    assert f"python tools/plot_timeline.py {tmp_path}/timeline.jsonl" in text


def test_summary_averages_the_first_and_last_steps_of_a_longer_run(tmp_path: Path) -> None:
    # 40 steps: windows of 10; rewards 0..39 / 10 -> means 0.45 and 3.45
    _write(
        tmp_path / "metrics.jsonl",
        [
            {
                "step": i + 1,
                "time": float(i + 1),
                "time/step_s": 1.0,
                "reward/mean": i / 10,
                "reward/accuracy": 0.5,
            }
            for i in range(40)
        ],
    )
    text = run_summary(tmp_path, tmp_path / "ck", "done")
    assert (
        "batch reward 0.450 -> 3.450, batch accuracy 0.500 -> 0.500 (means of the first and last 10 steps)"
        in text
    )


def test_summary_of_a_run_that_trained_nothing(tmp_path: Path) -> None:
    text = run_summary(tmp_path, tmp_path / "ck", "failed: rank 2 failed: boom")
    assert text.startswith("pivot: failed: rank 2 failed: boom") and "checkpoints: " in text


def test_summary_says_whether_the_held_out_gain_stands_out_of_its_noise(tmp_path: Path) -> None:
    # 20 prompts: 6 flip wrong -> right, 1 right -> wrong: diffs mean 0.25; stdev by hand
    before = [0.0] * 6 + [1.0] + [0.0] * 7 + [1.0] * 6
    after = [1.0] * 6 + [0.0] + [0.0] * 7 + [1.0] * 6
    diffs = [1.0] * 6 + [-1.0] + [0.0] * 13
    mean = 5 / 20
    se = (sum((d - mean) ** 2 for d in diffs) / 19) ** 0.5 / 20**0.5
    _write(
        tmp_path / "eval.jsonl",
        [
            {"step": 0, "accuracy": 0.35, "prompts": 20, "scores": before},
            {"step": 9, "accuracy": 0.6, "prompts": 20, "scores": after},
        ],
    )
    text = run_summary(tmp_path, tmp_path / "ck", "done")
    assert (
        f": +0.250 +/- {se:.3f} (paired standard error; +{mean / se:.1f} SE): gained, within 4 standard errors"
        in text
    )
    _write(
        tmp_path / "eval.jsonl",
        [
            {"step": 0, "accuracy": 0.0, "prompts": 40, "scores": [0.0] * 40},
            {"step": 9, "accuracy": 0.5, "prompts": 40, "scores": [0.0, 1.0] * 20},
        ],
    )
    assert "(paired standard error; +6.2 SE): learned" in run_summary(
        tmp_path, tmp_path / "ck", "done"
    )


def test_the_device_backends_lines_follow_the_shifts(tmp_path: Path) -> None:
    _write(tmp_path / "timeline.jsonl", [{"kind": "shift", "event": "shift_up", "role": "reward"}])
    lines = run_summary(
        tmp_path, tmp_path / "ck", "done", ["  emulated device time: x"]
    ).splitlines()
    assert lines[1].startswith("  shifts (up/down)") and lines[2] == "  emulated device time: x"
    assert "emulated" not in run_summary(tmp_path, tmp_path / "ck", "done")


def test_summary_of_the_training_slots_sizing(tmp_path: Path) -> None:
    sizing = {"kind": "shift", "event": "train_sizing", "devices": 4, "pick": 2}
    _write(
        tmp_path / "timeline.jsonl",
        [
            {**sizing, "cpu_s": 0.4},
            {"kind": "shift", "event": "train_resized", "step": 0, "was": 4, "devices": 2},
            {**sizing, "devices": 2, "pick": None, "cpu_s": 1.25},
        ],
    )
    text = run_summary(tmp_path, tmp_path / "ck", "done")
    assert "training slot sized 2 time(s) (1.2 CPU-s at most): re-sized 4 -> 2 after step 0" in text
    _write(tmp_path / "timeline.jsonl", [{**sizing, "pick": None, "cpu_s": 0.4}])
    assert "kept at 4 devices" in run_summary(tmp_path, tmp_path / "ck", "done")
    flags = "--train.devices 2 --planner.reserve-rollout 1 --planner.reserve-reward 1"
    _write(  # one that landed as the run ended: its pick, as the flags of the next launch
        tmp_path / "timeline.jsonl",
        [{**sizing, "pick": "T2/R1", "cpu_s": 0.4, "next_launch": flags}],
    )
    assert f"the last sizing, as the run ended, picked T2/R1: {flags}" in run_summary(
        tmp_path, tmp_path / "ck", "done"
    )
    _write(tmp_path / "timeline.jsonl", [])
    assert "training slot" not in run_summary(tmp_path, tmp_path / "ck", "done")
