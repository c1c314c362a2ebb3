"""A user's verifier and judge template plugged in, and their start-up errors (pivot/rl/plugins.py)."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from pivot.cli import parse
from pivot.config import ConfigError, RewardConfig
from pivot.rl.plugins import CheckedVerifier, check_plugins, judge_template, load_verifier
from pivot.rl.reward import verify


def _file(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_empty_spec_is_the_builtin_check() -> None:
    assert load_verifier("") is verify


def test_verifier_from_a_file_and_from_a_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = "def exact(response, ground_truth):\n    return float(response.strip() == ground_truth)\n"
    fn = load_verifier(f"{_file(tmp_path / 'my_check.py', src)}:exact")
    assert fn("42 ", "42") == 1.0 and fn("41", "42") == 0.0
    monkeypatch.syspath_prepend(str(tmp_path))
    assert load_verifier("my_check:exact")("7", "7") == 1.0


@pytest.mark.parametrize(
    "spec, words",
    [
        ("no_colon", "module:function"),
        ("pivot_no_such_module_xyz:f", "no module named"),
        ("/nonexistent/file.py:f", "no such file"),
        ("pivot.rl.reward:no_such_function", "no function"),
        ("pivot.rl.reward:parse_verdict", "must accept"),
    ],
)
def test_bad_verifier_is_one_line_config_error(spec: str, words: str) -> None:
    with pytest.raises(ConfigError) as e:
        load_verifier(spec)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_verifier_whose_import_fails_names_the_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="importing .* failed: ZeroDivisionError"):
        load_verifier(f"{_file(tmp_path / 'broken.py', 'x = 1 / 0')}:f")


def test_checked_verifier_counts_failures_and_goes_on(capsys: pytest.CaptureFixture[str]) -> None:
    def flaky(response: str, ground_truth: str) -> object:
        if response == "boom":
            raise RuntimeError("bad sample")
        return {"nan": float("nan"), "text": "yes"}.get(response, response == ground_truth)

    check = CheckedVerifier(flaky)
    assert [check(r, "a") for r in ("a", "b", "boom", "nan", "text", "a")] == [
        1.0,
        0.0,
        0.0,
        0.0,
        0.0,
        1.0,
    ]
    assert check.errors == 3
    assert capsys.readouterr().out.count("verifier failed") == 1  # said once, counted always


def test_judge_template_from_file(tmp_path: Path) -> None:
    path = _file(tmp_path / "judge.txt", "Q: {question}\nA: {response}\nVerdict:")
    assert judge_template(RewardConfig(judge_template_file=str(path))) == path.read_text()
    assert (
        judge_template(RewardConfig(judge_template="{question}{response}"))
        == "{question}{response}"
    )
    with pytest.raises(ConfigError, match="judge_template_file.*missing.txt"):
        judge_template(RewardConfig(judge_template_file=str(tmp_path / "missing.txt")))
    with pytest.raises(ConfigError, match=r"judge_template_file .*bad\.txt: .*\{response\}"):
        check_plugins(
            RewardConfig(judge_template_file=str(_file(tmp_path / "bad.txt", "Q: {question}")))
        )


def test_cli_rejects_contradictory_and_bad_plugin_flags(tmp_path: Path) -> None:
    path = _file(tmp_path / "judge.txt", "{question} {response}")
    with pytest.raises(ConfigError, match="not both"):
        parse(
            [
                "--reward.judge-template",
                "{question}{response}",
                "--reward.judge-template-file",
                str(path),
            ],
            4,
            4,
        )
    with pytest.raises(ConfigError, match="reward.verifier"):
        parse(["--reward.verifier", "nope"], 4, 4)
    cfg = parse(["--reward.judge-template-file", str(path), "--eval.every", "5"], 4, 4)
    assert cfg.eval.every == 5


def test_wandb_flag_needs_wandb(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "wandb", None)  # find_spec then reports it missing
    monkeypatch.setattr(
        "importlib.util.find_spec", lambda name, *a: None if name == "wandb" else object()
    )
    with pytest.raises(ConfigError, match="pip install wandb"):
        parse(["--log.wandb"], 4, 4)


def test_runlog_sends_steps_and_evals_to_wandb_offline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pivot.rl.evaluation import EvalResult
    from pivot.runtime.records.metrics import RunLog

    calls: list[tuple] = []

    class Run:
        def log(self, data: dict, step: int) -> None:
            calls.append(("log", step, data))

        def finish(self) -> None:
            calls.append(("finish",))

    fake = types.ModuleType("wandb")
    fake.init = lambda **kw: calls.append(("init", kw["project"])) or Run()  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "wandb", fake)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    log = RunLog(tmp_path, tensorboard=False, wandb_project="proj", config={"seed": 0})
    import os

    assert os.environ["WANDB_MODE"] == "offline"
    log.step(3, {"reward/mean": 0.5, "note": "text"})
    log.eval(
        EvalResult(step=4, accuracy=0.25, prompts=8, response_len=9.0, versions=(4, 4), seconds=1.0)
    )
    log.close()
    assert calls[0] == ("init", "proj")
    assert calls[1] == ("log", 3, {"reward/mean": 0.5})
    assert calls[2] == ("log", 4, {"eval/accuracy": 0.25, "eval/response_len": 9.0})
    assert calls[-1] == ("finish",)
    assert '"accuracy": 0.25' in (tmp_path / "eval.jsonl").read_text()


def test_a_judge_template_file_without_a_field_names_the_file_not_the_template(
    tmp_path: Path,
) -> None:
    """A 1,139-character template without {question} used to be echoed whole; now the line names
    the file, the field, the length and how it starts."""
    file = tmp_path / "judge.txt"
    file.write_text("Judge this.\n" + "x" * 1100 + "\nResponse: {response}\n")
    cfg = RewardConfig(judge_template_file=str(file))
    with pytest.raises(ConfigError) as e:
        check_plugins(cfg)
    text = str(e.value)
    assert text.startswith(
        f"reward.judge_template_file {file}: judge template must contain {{question}}"
    )
    assert f"(it has {len(file.read_text())} characters, starting 'Judge this." in text
    assert len(text) < 300
