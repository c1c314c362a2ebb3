"""Held-out set construction and the evaluation bookkeeping (pivot/rl/evaluation.py)."""
from __future__ import annotations

import json
from pathlib import Path

from pivot.config import DataConfig, EvalConfig
from pivot.rl.data import load_dataset
from pivot.rl.evaluation import EvalRun, eval_due, split_heldout


def test_synthetic_heldout_is_disjoint_from_training_and_deterministic() -> None:
    data = DataConfig(synthetic_size=64)
    train = load_dataset(data, seed=0)
    kept, held = split_heldout(data, EvalConfig(prompts=50), train, seed=0)
    assert kept is train  # nothing is taken from the training set
    assert len(held) == 50
    texts = {p.text for p in held}
    assert len(texts) == 50, "held-out prompts repeat"
    assert not texts & {p.text for p in train.prompts}
    again = split_heldout(data, EvalConfig(prompts=50), load_dataset(data, seed=0), seed=0)[1]
    assert [p.text for p in again] == [p.text for p in held]
    for p in held:  # the ground truth is the arithmetic answer of the question
        a, op, b = p.text.split("\n")[0].split("=")[0].replace("-", " - ").replace("+", " + ").split()[-3:]
        assert int(p.ground_truth) == (int(a) + int(b) if op == "+" else int(a) - int(b))


def _jsonl(path: Path, n: int) -> Path:
    path.write_text("".join(json.dumps({"prompt": f"q{i}", "ground_truth": str(i)}) + "\n" for i in range(n)))
    return path


def test_user_dataset_rows_are_held_out_of_training(tmp_path: Path) -> None:
    data = DataConfig(path=str(_jsonl(tmp_path / "d.jsonl", 100)))
    train = load_dataset(data)
    kept, held = split_heldout(data, EvalConfig(prompts=64), train, seed=3)
    assert len(held) == 10  # at most a tenth of the file
    assert len(kept) == 90
    assert {p.text for p in held}.isdisjoint(p.text for p in kept.prompts)
    assert {p.id for p in held} | {p.id for p in kept.prompts} == set(range(100))


def test_tiny_user_dataset_gets_no_heldout_and_eval_path_wins(tmp_path: Path) -> None:
    data = DataConfig(path=str(_jsonl(tmp_path / "d.jsonl", 9)))
    train = load_dataset(data)
    assert split_heldout(data, EvalConfig(), train, seed=0) == (train, [])
    kept, held = split_heldout(data, EvalConfig(prompts=3, path=str(_jsonl(tmp_path / "e.jsonl", 5))), train, seed=0)
    assert kept is train and [p.text for p in held] == ["q0", "q1", "q2"]


def test_eval_off_changes_nothing() -> None:
    data = DataConfig(synthetic_size=64)
    train = load_dataset(data)
    assert split_heldout(data, EvalConfig(every=0), train, seed=0) == (train, [])


def test_eval_due_before_first_every_k_and_after_last() -> None:
    assert [s for s in range(0, 26) if eval_due(s, 25, 10)] == [0, 10, 20, 25]
    assert not any(eval_due(s, 25, 0) for s in range(26))


def test_eval_run_accuracy_and_versions() -> None:
    run = EvalRun(step=4, total=3, started=10.0)
    for score, tokens, version in ((1.0, 5, 4), (0.0, 7, 3), (1.0, 6, 4)):
        assert not run.finished
        run.add(score, tokens, version)
    assert run.finished
    r = run.result(now=12.5)
    assert (r.step, r.prompts, r.versions, r.seconds) == (4, 3, (3, 4), 2.5)
    assert abs(r.accuracy - 2 / 3) < 1e-12 and r.response_len == 6.0
