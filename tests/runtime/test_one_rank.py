"""One device, no torchrun (`python pivot/main.py`: how a user tries Pivot on one GPU): the job
says it runs colocated, trains every step and audits exactly once. It used to train step 1, then
the planner moved its only device to training and nothing moved it back."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pivot.runtime.job.inputs import too_small_to_shift
from pivot.runtime.records.audit import exactly_once
from tests.conftest import ROOT
from tests.runtime.test_runtime import rows


def test_which_worlds_are_too_small_to_shift() -> None:
    from configs.presets import get_preset

    cfg = get_preset("tiny-cpu")
    assert too_small_to_shift(cfg, 1)
    assert not too_small_to_shift(cfg, 2)  # a replica each; training shifts one down
    cfg.reward.tp = 2
    assert too_small_to_shift(cfg, 2) and not too_small_to_shift(cfg, 3)
    cfg.cluster.mode = "colocated"
    assert not too_small_to_shift(cfg, 1)  # asked for already


@pytest.mark.slow  # the tiny preset's 40 steps on one rank: about 70 s
def test_one_rank_without_torchrun_trains_the_tiny_preset_and_learns(tmp_path: Path) -> None:
    from configs.presets import get_preset

    preset = get_preset("tiny-cpu")
    run_dir, steps = tmp_path / "run", preset.train.steps
    b, g = preset.train.batch_prompts, preset.train.group_size
    cmd = [sys.executable, str(ROOT / "pivot" / "main.py"), "--log.dir", str(run_dir),
           "--log.no-progress"]  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TORCHELASTIC", "RANK"))}
    out = subprocess.run(
        cmd, capture_output=True, text=True, timeout=600, env={**env, "OMP_NUM_THREADS": "1"}
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    said = (out.stdout + out.stderr).replace(str(tmp_path), "")
    assert "running colocated (every role on every device, in turn)" in said
    assert "torchrun" not in said
    learned = [line for line in out.stdout.splitlines() if "held-out accuracy (greedy" in line]
    assert learned and learned[-1].endswith(": learned"), out.stdout[-2000:]
    assert exactly_once(run_dir, steps, b, g).violations == []
    assert_one_step_numbering(run_dir, out.stdout, steps)
    # a sample row reads back on its own: its prompt, ground truth, response, the judge's output
    # and the score parsed from it, which with the verifier's makes its reward (weights 1, 1)
    samples = rows(run_dir, "samples.jsonl")
    assert len(samples) == steps * b * g
    for r in samples:
        assert r["prompt_text"] and r["ground_truth"] and isinstance(r["response"], str)
        assert isinstance(r["judge_output"], str) and r["judge_output"]
        assert r["reward"] == pytest.approx(r["verifiable"] + r["judge_score"])


def assert_one_step_numbering(run_dir: Path, console: str, steps: int) -> None:
    """Step k is the k-th step trained (1 to `steps`) in the console, metrics.jsonl, TensorBoard
    and samples.jsonl; an eval or a checkpoint at k comes after k steps (0: before training)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    trained = list(range(1, steps + 1))
    said = [int(line.split(":")[0].split()[1]) for line in console.splitlines()
            if line.startswith("step ")]  # fmt: skip
    assert said == trained, console[-2000:]
    assert [r["step"] for r in rows(run_dir, "metrics.jsonl")] == trained
    tb = EventAccumulator(str(run_dir / "tb"))
    tb.Reload()
    assert [e.step for e in tb.Scalars("reward/mean")] == trained
    assert sorted({r["step"] for r in rows(run_dir, "samples.jsonl")}) == trained
    evals = [r["step"] for r in rows(run_dir, "eval.jsonl")]
    assert evals[0] == 0 and evals[-1] == steps, evals
    eval_lines = [line for line in console.splitlines() if line.startswith("eval after step ")]
    assert [int(line.split()[3].rstrip(":")) for line in eval_lines] == evals
    committed = [
        r["step"] for r in rows(run_dir, "timeline.jsonl") if r.get("event") == "checkpoint"
    ]
    kept = sorted(int(p.name[len("step_") :]) for p in (run_dir / "checkpoints").glob("step_*"))
    assert committed[-1] == kept[-1] == steps and set(kept) <= set(committed), (committed, kept)
