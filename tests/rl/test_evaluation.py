"""Held-out set construction and the evaluation bookkeeping (pivot/rl/evaluation.py; the synthetic
task's fresh held-out problems: pivot/tiny/task.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pivot.config import DataConfig, EvalConfig
from pivot.rl.data import load_dataset
from pivot.rl.evaluation import EvalRun, eval_due, paired_gain, split_heldout
from pivot.tiny.synthetic import generate_problems
from pivot.tiny.task import heldout_split, training_set


def test_synthetic_heldout_is_disjoint_from_training_and_deterministic() -> None:
    data = DataConfig(synthetic_size=64)
    train = training_set(data, seed=0)
    kept, held = heldout_split(data, EvalConfig(prompts=50), train, seed=0)
    assert kept is train  # nothing is taken from the training set
    assert len(held) == 50
    texts = {p.text for p in held}
    assert len(texts) == 50, "held-out prompts repeat"
    assert not texts & {p.text for p in train.prompts}
    again = heldout_split(data, EvalConfig(prompts=50), training_set(data, seed=0), seed=0)[1]
    assert [p.text for p in again] == [p.text for p in held]
    for p in held:  # the ground truth is the arithmetic answer of the question
        a, op, b = (
            p.text.split("\n")[0].split("=")[0].replace("-", " - ").replace("+", " + ").split()[-3:]
        )
        assert int(p.ground_truth) == (int(a) + int(b) if op == "+" else int(a) - int(b))


def test_synthetic_heldout_avoids_the_tiny_policys_finetuning_problems_while_it_can() -> None:
    # the tiny policy's fine-tuning set: TinyRecipe's 8,000 problems of 1-3 digits, seed 0
    fine_tuned = {f"Problem: {p.question}\n" for p in generate_problems(8000, 0, max_digits=3)}
    data = DataConfig(synthetic_size=64)
    held = heldout_split(data, EvalConfig(prompts=200), training_set(data, seed=0), seed=0)[1]
    assert len(held) == 200 and not {p.text for p in held} & fine_tuned
    one_digit = DataConfig(synthetic_size=8, max_digits=1)  # 200 problems, all fine-tuned on
    held = heldout_split(
        one_digit, EvalConfig(prompts=20), training_set(one_digit, seed=0), seed=0
    )[1]
    assert len(held) == 20 and {p.text for p in held} <= fine_tuned  # better recalled than none


def _jsonl(path: Path, n: int) -> Path:
    path.write_text(
        "".join(json.dumps({"prompt": f"q{i}", "ground_truth": str(i)}) + "\n" for i in range(n))
    )
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
    kept, held = split_heldout(
        data, EvalConfig(prompts=3, path=str(_jsonl(tmp_path / "e.jsonl", 5))), train, seed=0
    )
    assert kept is train and [p.text for p in held] == ["q0", "q1", "q2"]


def test_eval_off_changes_nothing() -> None:
    data = DataConfig(synthetic_size=64)
    train = training_set(data)
    assert heldout_split(data, EvalConfig(every=0), train, seed=0) == (train, [])


def test_a_task_that_draws_fresh_problems_gives_them_instead_of_rows(tmp_path: Path) -> None:
    data = DataConfig(path=str(_jsonl(tmp_path / "d.jsonl", 100)))
    train = load_dataset(data)
    asked = []

    def fresh(n: int, seen: set[str]) -> list:
        asked.append((n, len(seen)))
        return train.prompts[:n]

    kept, held = split_heldout(data, EvalConfig(prompts=5), train, seed=0, fresh=fresh)
    assert kept is train and held == train.prompts[:5] and asked == [(5, 100)]


def test_eval_due_before_first_every_k_and_after_last() -> None:
    assert [s for s in range(0, 26) if eval_due(s, 25, 10)] == [0, 10, 20, 25]
    assert not any(eval_due(s, 25, 0) for s in range(26))


def test_eval_run_accuracy_and_versions() -> None:
    run = EvalRun(step=4, total=3, started=10.0)
    for prompt, score, tokens, version in (
        (2, 1.0, 5, 4),
        (0, 0.0, 7, 3),
        (1, 1.0, 6, 4),
    ):  # in finishing order
        assert not run.finished
        run.add(prompt, score, tokens, version)
    assert run.finished
    r = run.result(now=12.5)
    assert (r.step, r.prompts, r.versions, r.seconds) == (4, 3, (3, 4), 2.5)
    assert abs(r.accuracy - 2 / 3) < 1e-12 and r.response_len == 6.0
    assert r.scores == [0.0, 1.0, 1.0]  # prompt order


def test_paired_gain_counts_only_prompts_that_changed() -> None:
    # 100 prompts: 40 right both times, 50 wrong both times, 8 newly right, 2 newly wrong;
    # diffs: eight +1, two -1, ninety 0 -> mean 0.06, sample variance (8*0.94^2 + 2*1.06^2 + 90*0.06^2)/99
    before = [1.0] * 40 + [0.0] * 50 + [0.0] * 8 + [1.0] * 2
    after = [1.0] * 40 + [0.0] * 50 + [1.0] * 8 + [0.0] * 2
    gain, se = paired_gain(before, after)
    var = (8 * 0.94**2 + 2 * 1.06**2 + 90 * 0.06**2) / 99
    assert abs(gain - 0.06) < 1e-12 and abs(se - (var / 100) ** 0.5) < 1e-12
    unpaired = (
        (0.42 * 0.58 + 0.48 * 0.52) / 100
    ) ** 0.5  # the same accuracies as independent draws
    assert se < unpaired / 2
    with pytest.raises(ValueError, match="one length"):
        paired_gain([1.0, 0.0], [1.0])
