"""Bad-input corpus: each bad input is a one-line error naming it, or a counted fallback with
nothing lost. Cases covered elsewhere: malformed JSONL rows and missing keys
(tests/rl/test_data.py), a verifier that raises or returns NaN (tests/rl/test_plugins.py),
verdict formats (tests/rl/test_reward.py, tests/runtime/test_flow_templates.py), a NaN loss
skipped and N in a row aborting in the trainer (tests/roles/test_trainer.py), model folders
with a missing shard or a wrong shape (tests/model/test_checkpoint_errors.py), an unknown
preset and bad values (tests/config/test_config.py), judge template and template file together
(tests/rl/test_plugins.py); in the main job: tests/runtime/test_bad_runs.py."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pivot.cli import parse
from pivot.config import ConfigError, DataConfig, PivotConfig, RolloutConfig
from pivot.engine import Output
from pivot.model import TextTokenizer
from pivot.rl.buffer import SampleBuffer
from pivot.rl.data import PromptCursor, load_dataset, skipped_rows_line
from pivot.runtime.flow.rl_flow import RLFlow
from pivot.tiny.task import judge_template
from tests.model.test_tokenizer import QWEN3_TEMPLATE, _write_folder

GOOD = {"prompt": [{"role": "user", "content": "1+1?"}], "reward_model": {"ground_truth": "2"}}


def test_parquet_rows_missing_empty_or_mistyped_are_counted(tmp_path: Path) -> None:
    rows = [
        GOOD,
        {"prompt": None, "reward_model": {"ground_truth": "1"}},  # missing prompt
        {
            "prompt": [{"role": "user", "content": "2+2?"}],
            "reward_model": {"ground_truth": None},
        },  # missing answer
        {
            "prompt": [{"role": "user", "content": "   "}],
            "reward_model": {"ground_truth": "0"},
        },  # empty prompt
        {"prompt": [], "reward_model": {"ground_truth": "0"}},  # no messages
        GOOD,
    ]
    path = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    ds = load_dataset(DataConfig(path=str(path)))
    s = ds.stats
    assert [p.id for p in ds.prompts] == [0, 5]
    assert (s.rows, s.valid, s.missing_prompt, s.missing_answer, s.bad_type, s.skipped) == (
        6,
        2,
        2,
        1,
        1,
        4,
    )


def test_a_truncated_parquet_file_is_one_line_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "d.parquet"
    pq.write_table(pa.Table.from_pylist([GOOD] * 50), path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(ValueError) as e:
        load_dataset(DataConfig(path=str(path)))
    assert str(e.value).startswith(
        f"dataset {path}: not a readable parquet file"
    ) and "\n" not in str(e.value)


def test_jsonl_lines_that_are_not_utf8_are_counted(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    good = json.dumps({"prompt": "3+4?", "ground_truth": "7"}).encode()
    latin1 = '{"prompt": "caf\u00e9 3+4?", "ground_truth": "7"}'.encode(
        "latin-1"
    )  # é as one byte 0xe9
    path.write_bytes(b"\n".join([good, latin1, b"\xff\xfe garbage", good]) + b"\n")
    ds = load_dataset(DataConfig(path=str(path)))
    assert [p.id for p in ds.prompts] == [0, 3]
    assert (ds.stats.bad_utf8, ds.stats.skipped) == (2, 2)
    assert ds.stats.first_error.startswith("line 2: not UTF-8")
    path.write_bytes(latin1 + b"\n")
    with pytest.raises(
        ValueError, match=r"no valid row among 1 .*first problem: line 1: not UTF-8"
    ):
        load_dataset(DataConfig(path=str(path)))


def test_empty_prompts_are_counted(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    rows = [
        {"prompt": "", "ground_truth": "1"},
        {"prompt": " \n\t", "ground_truth": "1"},
        {"prompt": [{"role": "user", "content": ""}], "ground_truth": "1"},
        {"prompt": "5-2?", "ground_truth": "3"},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ds = load_dataset(DataConfig(path=str(path)))
    assert [p.text for p in ds.prompts] == ["5-2?"] and ds.stats.missing_prompt == 3


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> TextTokenizer:
    path = tmp_path_factory.mktemp("tok")
    _write_folder(path, QWEN3_TEMPLATE, None)
    return TextTokenizer.from_pretrained(path)


def flow(
    tok: TextTokenizer, tmp_path: Path, prompts: list[str], limit: int, group: int = 2
) -> RLFlow:
    path = tmp_path / "d.jsonl"
    path.write_text("".join(json.dumps({"prompt": p, "ground_truth": "1"}) + "\n" for p in prompts))
    cfg = PivotConfig(
        data=DataConfig(path=str(path)), rollout=RolloutConfig(max_prompt_tokens=limit)
    )
    cfg.train.batch_prompts, cfg.train.group_size = 2, group
    return RLFlow(
        cfg,
        PromptCursor(load_dataset(cfg.data), shuffle=False),
        tok,
        tok,
        SampleBuffer(group, 1),
        1,
        judge_template(cfg.reward),
    )


def test_prompts_over_the_limit_are_skipped_and_counted(tok: TextTokenizer, tmp_path: Path) -> None:
    short, long = "1+1?", "1+1? " * 40
    limit = len(tok.encode(short)) + 2
    assert len(tok.encode(long)) > limit
    f = flow(tok, tmp_path, [long, short, long, short], limit)
    seqs = f.fill(version=0, total_steps=1)
    assert len(seqs) == 2 * 2 and all(len(s.request.prompt_ids) <= limit for s in seqs)
    assert (
        f.stats.prompts_skipped_too_long == 2 and f.metrics()["count/prompts_skipped_too_long"] == 2
    )


def test_no_prompt_within_the_limit_is_one_line(tok: TextTokenizer, tmp_path: Path) -> None:
    with pytest.raises(ValueError) as e:
        flow(tok, tmp_path, ["1+1? " * 40, "2+2? " * 30], 8)
    assert str(e.value).startswith("rollout.max_prompt_tokens=8: no prompt of") and "\n" not in str(
        e.value
    )


@pytest.mark.parametrize(
    ("judge_text", "genrm_score"),
    [
        ("I am not sure at all", None),  # never a verdict: the fallback score, counted
        ("Verdict: 0 ... on reflection Verdict: 1", 1.0),  # two: the last one counts
        (
            "<think>Verdict: 1 is tempting</think> I cannot tell",
            None,
        ),  # only inside the thinking block
        ("<think>Verdict: 0</think> Verdict: 1", 1.0),
    ],
)
def test_genrm_verdicts_each_sample_judged_once_with_a_score(
    tok: TextTokenizer, tmp_path: Path, judge_text: str, genrm_score: float | None
) -> None:
    f = flow(tok, tmp_path, ["1+1?", "2+2?"], 64, group=1)
    rollouts = f.fill(version=0, total_steps=1)
    for seq in rollouts:  # both rollouts answer, then both are judged with the same text
        answer = tok.encode("Answer: 2")
        (judge,) = f.on_output(
            Output(seq.seq_id, seq.request.prompt_ids, answer, [0.0] * len(answer), "stop", 0)
        )
        again = f.on_output(
            Output(judge.seq_id, judge.request.prompt_ids, tok.encode(judge_text), [], "stop", 0)
        )
        for retry in again:  # an unparsable verdict is judged once more, sampled; then the rule
            assert retry.attempt == 1 and retry.request.params.temperature >= 0.6
            assert retry.request.prompt_ids == judge.request.prompt_ids
            text = tok.encode(judge_text)
            assert (
                f.on_output(Output(retry.seq_id, judge.request.prompt_ids, text, [], "stop", 0))
                == []
            )
        assert len(again) == (genrm_score is None)
    fallback, cfg = f.cfg.reward.fallback_score, f.cfg.reward
    assert f.buffer.ready(0)
    _, _, records = f.batch(0)
    assert [r["judgings"] for r in records] == [1, 1]
    want = genrm_score if genrm_score is not None else fallback
    for r in records:
        assert r["reward"] == pytest.approx(cfg.w_verifiable * r["verifiable"] + cfg.w_genrm * want)
    assert f.metrics()["count/unparsable_verdicts"] == (2 if genrm_score is None else 0)
    assert f.metrics()["count/verdict_retries"] == (2 if genrm_score is None else 0)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--preset", "tiny-gpu"], "preset='tiny-gpu'"),
        (
            ["--cluster.mode", "colocated", "--planner.strategy", "chaos"],
            "planner.strategy='chaos'",
        ),
        (
            [
                "--cluster.mode",
                "disaggregated",
                "--train.devices",
                "2",
                "--rollout.replicas",
                "2",
                "--reward.replicas",
                "1",
            ],
            "rollout.replicas=2",
        ),
    ],
)
def test_unknown_preset_and_contradictory_flags_are_one_line(argv: list[str], words: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse(argv, 4, 4)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_skipped_rows_are_said_once_with_the_first_ones_line(tmp_path: Path) -> None:
    """A malformed row is one line on stderr at start (not only a counter in metrics.jsonl),
    naming its line in the file: blank lines are no rows, but they are lines."""
    path = tmp_path / "d.jsonl"
    good = json.dumps({"prompt": "3+4?", "ground_truth": "7"})
    path.write_text("\n".join([good, "", good, "{not json", json.dumps({"prompt": "x"})]) + "\n")
    ds = load_dataset(DataConfig(path=str(path)))
    assert skipped_rows_line(ds) == (
        f"pivot: data {path}: skipped 2 of 4 rows (bad_json 1, missing_answer 1); "
        "first: line 4: not valid JSON"
    )
    path.write_text(good + "\n")
    assert skipped_rows_line(load_dataset(DataConfig(path=str(path)))) is None
