"""DAPO-format loading, bad rows, the synthetic set (pivot/tiny/task.py) and the resumable cursor."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pivot.config import DataConfig
from pivot.rl.data import PromptCursor, load_dataset, stats_dict
from pivot.tiny import synthetic
from pivot.tiny.task import synthetic_dataset, training_set

DAPO_ROWS = [
    {"prompt": [{"role": "user", "content": "What is 2+2?"}], "reward_model": {"style": "rule", "ground_truth": "4"}},
    {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "1/2 + 1/4?"}],
     "reward_model": {"style": "rule", "ground_truth": "3/4"}},
]  # fmt: skip


def test_parquet_nested_dapo(tmp_path: Path) -> None:
    path = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist(DAPO_ROWS), path)
    ds = load_dataset(DataConfig(path=str(path)))
    assert len(ds) == 2 and ds.stats.skipped == 0
    assert ds.prompts[0].text == "What is 2+2?" and ds.prompts[0].ground_truth == "4"
    assert ds.prompts[0].messages == [{"role": "user", "content": "What is 2+2?"}]
    assert ds.prompts[1].text == "system: Be brief.\nuser: 1/2 + 1/4?"


def test_jsonl_flat_plain_text_and_bad_rows(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    lines = [
        json.dumps({"question": "3*3?", "ground_truth": 9}),
        "{not json",
        json.dumps({"question": "no answer"}),
        json.dumps({"ground_truth": "1"}),
        json.dumps({"question": ["bad"], "ground_truth": "1"}),
        json.dumps({"question": "bool answer", "ground_truth": True}),
        "",
        json.dumps([1, 2]),
    ]
    path.write_text("\n".join(lines) + "\n")
    ds = load_dataset(DataConfig(path=str(path), prompt_key="question", answer_key="ground_truth"))
    assert [p.text for p in ds.prompts] == ["3*3?"] and ds.prompts[0].ground_truth == "9"
    assert ds.prompts[0].messages is None
    s = ds.stats
    assert (s.rows, s.valid, s.bad_json, s.missing_answer, s.missing_prompt, s.bad_type) == (
        7,
        1,
        1,
        1,
        1,
        3,
    )
    assert stats_dict(s)["skipped"] == 6


def test_no_valid_rows_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"prompt": "x"}) + "\n")
    with pytest.raises(
        ValueError, match="no valid row.*line 1: no field 'reward_model.ground_truth'"
    ):
        load_dataset(DataConfig(path=str(path)))
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        load_dataset(DataConfig(path=str(tmp_path / "missing.jsonl")))


def test_rows_without_the_prompt_field_list_the_fields_they_have(tmp_path: Path) -> None:
    """A dataset whose prompt column is named otherwise: the line lists the row's fields and
    the flag that reads another."""
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"question": "1+1?", "answer": "2", "id": 7}) + "\n")
    with pytest.raises(ValueError) as e:
        load_dataset(DataConfig(path=str(path)))
    assert (
        "line 1: no field 'prompt' (its fields: question, answer, id; --data.prompt-key NAME"
        in str(e.value)
    )
    assert "\n" not in str(e.value)
    (tmp_path / "d.csv").write_text("a,b")
    with pytest.raises(ValueError, match="unknown format"):
        load_dataset(DataConfig(path=str(tmp_path / "d.csv")))
    with pytest.raises(
        ValueError, match="data.path: empty"
    ):  # the default set is pivot.tiny.task's
        load_dataset(DataConfig())


def test_synthetic_source_matches_generator() -> None:
    ds = synthetic_dataset(DataConfig(synthetic_size=10, min_digits=1, max_digits=3), seed=5)
    problems = synthetic.generate_problems(10, 5, 1, 3)
    assert [p.text for p in ds.prompts] == [synthetic.policy_prompt(p) for p in problems]
    assert [p.ground_truth for p in ds.prompts] == [p.answer for p in problems]


def test_rl_draws_are_not_the_tiny_policys_finetuning_draw() -> None:
    # the tiny policy learnt from generate_problems(8000, seed 0, 1-3 digits); RL at seed 0 must
    # not replay its first 4,096 problems (a fresh draw shares only small problems with it)
    tuned = [synthetic.policy_prompt(p) for p in synthetic.generate_problems(8000, 0, 1, 3)]
    for seed in (0, 1):
        texts = [p.text for p in training_set(DataConfig(synthetic_size=4096), seed=seed).prompts]
        assert texts != tuned[:4096]
        assert sum(t in set(tuned) for t in texts) / len(texts) < 0.5


def test_cursor_epochs_and_resume() -> None:
    ds = training_set(DataConfig(synthetic_size=7))
    cur = PromptCursor(ds, seed=3)
    first = [p.id for p in cur.next_batch(7)]
    assert sorted(first) == list(range(7))  # one epoch is a permutation
    cur.next_batch(3)  # into epoch 1
    state = cur.state_dict()
    expected = [p.id for p in cur.next_batch(9)]
    resumed = PromptCursor(ds, seed=0)
    resumed.load_state_dict(json.loads(json.dumps(state)))
    assert [p.id for p in resumed.next_batch(9)] == expected
    assert state["epoch"] == 1 and state["index"] == 3
    other = PromptCursor(training_set(DataConfig(synthetic_size=8)))
    with pytest.raises(ValueError, match="7 prompts"):
        other.load_state_dict(state)
