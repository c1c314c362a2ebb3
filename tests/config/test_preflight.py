"""Preflight: what a run needs from files and folders is checked on every rank before any process
group (and by --dry-run): one line per problem from rank 0, exit code 2, no traceback; under
torchrun every rank leaves that line in its error file, which torchrun's summary prints as the
root cause (pivot/preflight.py, pivot/bad_input.py)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import transformers
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

from pivot import bad_input
from pivot.cli import parse
from pivot.main import main
from pivot.preflight import HEAD_ROWS, dataset_problems, preflight_problems
from tests.conftest import ROOT, torchrun_main

GOOD_ROW = {"prompt": "1+1?", "reward_model": {"ground_truth": "2"}}


@pytest.fixture(autouse=True)
def rank0_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    """`python pivot/main.py`: rank 0, no torchrun (the test runner's own env may say otherwise)."""
    for name in ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "TORCHELASTIC_ERROR_FILE"):
        monkeypatch.delenv(name, raising=False)


def stopped(argv: list[str], capsys: pytest.CaptureFixture[str]) -> list[str]:
    """main(argv)'s stderr lines, asserting it stopped with exit code 2 (returned or raised)."""
    try:
        rc = main(argv)
    except SystemExit as e:
        rc = e.code
    out, err = capsys.readouterr()
    assert rc == 2, out + err
    return err.splitlines()


def jsonl(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_dry_run_exits_2_on_a_missing_data_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "nope.jsonl"
    said = stopped(["--dry-run", "--data.path", str(data), "--log.dir", str(tmp_path)], capsys)
    assert said == [f"pivot: cannot start: dataset {data}: no such file (--data.path)"]


def test_a_data_file_whose_first_rows_are_malformed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = jsonl(tmp_path / "d.jsonl", ['{"prompt": "1+1?", "answer": ', '{"prompt": "2+2?"}'])
    said = stopped(["--dry-run", "--data.path", str(data), "--log.dir", str(tmp_path)], capsys)
    assert said == [
        f"pivot: cannot start: dataset {data}: no valid row among 2 (prompt_key='prompt', "
        "answer_key='reward_model.ground_truth'); first problem: line 1: not valid JSON "
        "(--data.path)"
    ]


def test_a_bad_first_row_among_good_ones_is_the_runs_to_skip(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the run skips and counts bad rows: preflight asks for one usable row, as the run does
    data = jsonl(tmp_path / "d.jsonl", [json.dumps(GOOD_ROW), "{broken", json.dumps(GOOD_ROW)])
    cfg = parse(["--data.path", str(data), "--eval.path", str(data)], 4, 4)
    assert dataset_problems(cfg) == []
    # and a dry run says what the run will skip, in the run's words, and goes on
    assert main(["--dry-run", "--data.path", str(data), "--log.dir", str(tmp_path / "run")]) == 0
    said = [line for line in capsys.readouterr().err.splitlines() if line.startswith("pivot: data")]
    assert said == [
        f"pivot: data {data}: skipped 1 of 3 rows (bad_json 1); first: line 2: not valid JSON"
    ]


def test_eval_path_is_read_with_the_data_keys(tmp_path: Path) -> None:
    held_out = jsonl(tmp_path / "e.jsonl", [json.dumps({"question": "1+1?", "answer": "2"})])
    cfg = parse(["--eval.path", str(held_out)], 4, 4)
    assert dataset_problems(cfg) == [
        f"dataset {held_out}: no valid row among 1 (prompt_key='prompt', answer_key="
        "'reward_model.ground_truth'); first problem: line 1: no field 'prompt' (its fields: "
        "question, answer; --data.prompt-key NAME reads another) (--eval.path)"
    ]
    cfg = parse(
        [
            "--eval.path",
            str(held_out),
            "--data.prompt-key",
            "question",
            "--data.answer-key",
            "answer",
        ],
        4,
        4,
    )
    assert dataset_problems(cfg) == []


def test_a_large_parquet_is_checked_from_its_first_rows(tmp_path: Path) -> None:
    rows = [
        {"prompt": f"{i}+1?", "reward_model": {"ground_truth": str(i + 1)}} for i in range(17_000)
    ]
    data = tmp_path / "dapo.parquet"
    pq.write_table(pa.Table.from_pylist(rows), data, row_group_size=1024)
    t0 = time.perf_counter()
    assert dataset_problems(parse(["--data.path", str(data)], 4, 4)) == []
    assert time.perf_counter() - t0 < 1.0
    wrong_key = dataset_problems(parse(["--data.path", str(data), "--data.prompt-key", "q"], 4, 4))
    assert wrong_key == [
        f"dataset {data} (its first {HEAD_ROWS} rows): no valid row among {HEAD_ROWS} "
        "(prompt_key='q', answer_key='reward_model.ground_truth'); first problem: row 0: no "
        "field 'q' (its fields: prompt, reward_model; --data.prompt-key NAME reads another) "
        "(--data.path)"
    ]
    data.write_bytes(data.read_bytes()[:100])  # truncated: the run's own words for it
    (problem,) = dataset_problems(parse(["--data.path", str(data)], 4, 4))
    assert problem.startswith(f"dataset {data}: not a readable parquet file (")


def test_a_missing_model_folder_stops_the_run_before_any_process_group(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "Qwen2.5-7B"
    # not a dry run: main would go on to torch.distributed if preflight let it
    said = stopped(["--model.policy", str(folder), "--log.dir", str(tmp_path / "run")], capsys)
    assert said == [f"pivot: cannot start: model.policy={str(folder)!r}: no such folder"]


def test_a_dry_run_estimates_the_presets_absent_folders_but_checks_given_ones(
    tmp_path: Path,
) -> None:
    # planning a paper preset away from its GPUs: its /models/... folders are estimated
    cfg = parse(["--preset", "qwen2.5-7b+qwen3-30b-a3b", "--dry-run"], 4, 4)
    assert preflight_problems(cfg) == []  # the plan estimates them from --model.*-params-b
    absent = str(tmp_path / "absent")  # a folder named on the command line is a typo to catch
    cfg = parse(["--dry-run", "--model.policy", absent, "--model.genrm", absent], 4, 4)
    assert preflight_problems(cfg) == [
        f"model.policy={absent!r}: no such folder",
        f"model.genrm={absent!r}: no such folder",
    ]
    headless = tmp_path / "config-only"
    transformers.Qwen2Config(
        hidden_size=32, num_attention_heads=4, num_key_value_heads=2
    ).save_pretrained(headless)
    cfg = parse(["--dry-run", "--model.genrm", str(headless)], 4, 4)
    assert preflight_problems(cfg) == [
        f"model.genrm={str(headless)!r}: {headless}: no model.safetensors and no "
        "model.safetensors.index.json"
    ]


def test_an_unknown_judge_template_placeholder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    template = tmp_path / "judge.txt"
    template.write_text("Q: {question}\nA: {response}\nReference: {ground_truth}\nVerdict:")
    said = stopped(
        ["--dry-run", "--reward.judge-template-file", str(template), "--log.dir", str(tmp_path)],
        capsys,
    )
    assert said == [
        f"pivot: cannot start: reward.judge_template_file={str(template)!r}: unknown placeholder "
        "{ground_truth}: only {question} and {response} are filled in (the GenRM would read the "
        "rest as written)"
    ]
    json_braces = 'Q: {question} A: {response} Answer as {"score": 1}'  # no placeholder in it
    assert preflight_problems(parse(["--reward.judge-template", json_braces], 4, 4)) == []


def test_a_missing_judge_template_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    template = tmp_path / "judge.txt"
    (said,) = stopped(["--dry-run", "--reward.judge-template-file", str(template)], capsys)
    assert said.startswith(
        f"pivot: config error: reward.judge_template_file={str(template)!r}: cannot read it "
        "(FileNotFoundError"
    )


def test_a_checkpoint_folder_that_cannot_be_created(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    ckpt = blocker / "checkpoints"
    said = stopped(
        ["--dry-run", "--checkpoint.dir", str(ckpt), "--log.dir", str(tmp_path / "run")], capsys
    )
    assert said == [
        f"pivot: cannot start: checkpoint.dir={str(ckpt)!r}: {blocker} is a file, not a folder"
    ]
    said = stopped(["--dry-run", "--log.dir", str(blocker)], capsys)
    assert said == [f"pivot: cannot start: log.dir={str(blocker)!r}: {blocker} is not a folder"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into any folder")
def test_a_read_only_log_folder(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    cfg = parse(["--log.dir", str(locked / "run")], 4, 4)
    assert preflight_problems(cfg) == [
        f"log.dir={str(locked / 'run')!r}: {locked} is not writable by this user (the folder "
        "would be created in it)"
    ]


def test_a_verifier_that_fails_to_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plugin = tmp_path / "my_check.py"
    plugin.write_text(
        "import json\nraise RuntimeError('no GPU here')\n\ndef score(r, g):\n    return 1.0\n"
    )
    said = stopped(["--dry-run", "--reward.verifier", f"{plugin}:score"], capsys)
    assert said == [
        f"pivot: config error: reward.verifier='{plugin}:score': importing {plugin} failed: "
        "RuntimeError: no GPU here"
    ]


def error_file_summary(path: Path, rank: int, exitcode: int) -> str:
    """What torchrun's agent prints for this worker's error file: torch's own reader and format."""
    return ChildFailedError(
        "pivot/main.py", {rank: ProcessFailure(rank, 1234, exitcode, str(path))}
    ).format_msg()


def test_a_silent_rank_leaves_pivots_line_for_torchruns_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    error_file = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    monkeypatch.setattr(bad_input, "LINGER_S", 0.0)
    with pytest.raises(SystemExit) as stop:
        main(["--rollout.tp", "8"])
    assert stop.value.code == 2
    assert capsys.readouterr().err == ""  # rank 0 speaks
    summary = error_file_summary(error_file, 1, 2)
    root = summary.split("Root Cause (first observed failure):")[1]
    assert (
        "  traceback : pivot: config error: rollout.tp=8: larger than the world (4 devices)\n"
        in root
    )
    assert "Traceback (most recent call last)" not in summary


def test_rank0_says_it_once_and_records_it_without_waiting(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    error_file = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    monkeypatch.setenv("RANK", "0")
    data = tmp_path / "nope.jsonl"
    t0 = time.perf_counter()
    said = stopped(["--data.path", str(data), "--log.dir", str(tmp_path / "run")], capsys)
    assert time.perf_counter() - t0 < bad_input.LINGER_S
    line = f"pivot: cannot start: dataset {data}: no such file (--data.path)"
    assert said == [line]
    assert json.loads(error_file.read_text())["message"]["message"] == line
    assert f"traceback : {line}\n" in error_file_summary(error_file, 0, 2)


def test_tyros_usage_error_leaves_a_line_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    error_file = tmp_path / "error.json"
    monkeypatch.setenv("TORCHELASTIC_ERROR_FILE", str(error_file))
    said = stopped(["--no-such-flag", "3"], capsys)
    assert any("Unrecognized options" in line for line in said)  # tyro's box, on rank 0
    assert "pivot: config error: the command line was not accepted" in error_file_summary(
        error_file, 0, 2
    )


@pytest.mark.slow
def test_under_torchrun_the_root_cause_is_pivots_line(tmp_path: Path) -> None:
    data = tmp_path / "nope.jsonl"
    out = subprocess.run(
        torchrun_main(2, "--data.path", str(data), "--log.dir", str(tmp_path / "run")),
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        cwd=tmp_path,
    )
    text = out.stdout + out.stderr
    line = f"pivot: cannot start: dataset {data}: no such file (--data.path)"
    assert out.returncode != 0
    assert [s for s in text.splitlines() if s.startswith("pivot:")] == [line], text[-3000:]
    root = text.split("Root Cause (first observed failure):")[1]
    assert f"  traceback : {line}\n" in root, text[-3000:]
    # torchrun's agent prints its own traceback; none comes from Pivot's code
    own = f'File "{ROOT / "pivot"}/'  # Pivot's sources, not any path with /pivot/ in it (a clone
    # named pivot holds its venv's torch under pivot/.venv/)
    assert not [s for s in text.splitlines() if own in s], text[-3000:]
