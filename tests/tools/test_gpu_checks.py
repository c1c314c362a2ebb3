"""tools/gpu_checks.py on a machine without CUDA: it imports, checks its arguments, skips every
GPU check with exit 0, and its `job` check reads a main job's run folder (a real CPU run's format)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import tools.gpu_checks as gpu_checks
from tests.conftest import ROOT

TOOL = ROOT / "tools" / "gpu_checks.py"


def test_help_lists_every_check() -> None:
    out = subprocess.run(
        [sys.executable, str(TOOL), "--help"], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and all(
        c in out.stdout
        for c in ("engine", "sglang", "vllm", "train", "train-pace", "numerics", "job")
    )


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["nope"],
        ["engine", "--seqs", "0"],
        ["train", "--steps", "-1"],
        ["train-pace", "--steps", "0"],
        ["train-pace", "--layers", "-1"],
        ["job", "d"],
    ],
)
def test_bad_arguments_exit_2(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as e:
        gpu_checks.parse_args(argv)
    assert e.value.code == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA present: the checks would run")
@pytest.mark.parametrize("check", ["engine", "sglang", "vllm", "train", "train-pace", "numerics"])
def test_gpu_checks_skip_without_cuda(check: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert gpu_checks.main([check]) == 0
    assert capsys.readouterr().out == f"SKIP {check}: no CUDA device visible to torch\n"


def _run_folder(path: Path, steps: int, roles: list[str]) -> Path:
    path.mkdir()
    (path / "metrics.jsonl").write_text(
        "".join(json.dumps({"step": s}) + "\n" for s in range(1, steps + 1))
    )
    events = [
        {"kind": "shift", "event": "shift_up", "role": r, "phases": {"total": 0.5 + i}}
        for i, r in enumerate(roles)
    ]
    events.append({"kind": "sample", "time": 1.0})
    (path / "timeline.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return path


def test_job_check_reads_the_run_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(gpu_checks, "FAILED", [])
    good = _run_folder(tmp_path / "good", 3, ["rollout", "reward", "train"])
    assert (
        gpu_checks.main(
            ["job", str(good), "--steps", "3", "--name", "main-job", "--min-roles", "2"]
        )
        == 0
    )
    assert (
        capsys.readouterr().out
        == "PASS main-job: 3 steps, 3 shift ups (reward, rollout, train), slowest 2.50 s\n"
    )
    short = _run_folder(tmp_path / "short", 2, ["rollout"])
    assert gpu_checks.main(["job", str(short), "--steps", "3", "--name", "x"]) == 1
    assert capsys.readouterr().out == "FAIL x: AssertionError: 2 steps recorded, expected 3\n"
    monkeypatch.setattr(gpu_checks, "FAILED", [])
    assert (
        gpu_checks.main(["job", str(short), "--steps", "2", "--name", "y", "--min-roles", "2"]) == 1
    )
    assert "FAIL y: AssertionError: shift ups of ['rollout'] only" in capsys.readouterr().out
    monkeypatch.setattr(gpu_checks, "FAILED", [])
    assert gpu_checks.main(["job", str(tmp_path / "absent"), "--steps", "1"]) == 1
    assert capsys.readouterr().out.startswith("FAIL main-job: FileNotFoundError")


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_a_missing_library_is_a_skip_line_not_a_failure(
    engine: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """sglang and vLLM (not in this venv) make their three checks SKIP lines naming them; nothing
    is installed."""
    monkeypatch.setitem(sys.modules, engine, None)
    gpu_checks.check_production(gpu_checks.parse_args([engine]))
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == [
        "SKIP gps-read",
        f"SKIP {engine}-greedy",
        f"SKIP {engine}-shift",
    ]
    assert all(f"{engine} is not usable" in line for line in lines)
    assert not gpu_checks.FAILED
    assert gpu_checks.missing("json") == "" and "flash_attn" in gpu_checks.missing(
        "json", "flash_attn"
    )


@pytest.mark.slow
def test_the_numerics_check_runs_on_cpu() -> None:
    """The GPU's numerics check, run here on the CPU's bf16 kernels so it cannot rot unseen."""
    out = subprocess.run(
        [sys.executable, str(TOOL), "numerics", "--device", "cpu", "--new-tokens", "4"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**__import__("os").environ, "OMP_NUM_THREADS": "1"},
    )
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    passed = [line for line in out.stdout.splitlines() if line.startswith("PASS numerics-")]
    assert len(passed) == 4, out.stdout


@pytest.mark.slow
def test_the_train_pace_check_runs_on_cpu() -> None:
    """The GPU's train-pace check on the CPU at bench_launches' small widths (2 layers, a
    2,048-token micro-batch of the tiny preset's lengths), so its path cannot rot unseen."""
    out = subprocess.run(
        [sys.executable, str(TOOL), "train-pace", "--device", "cpu", "--small", "--layers", "2",
         "--steps", "1", "--budget", "2048", "--preset", "tiny-cpu", "--models", "Qwen2.5-1.5B"],
        capture_output=True,
        text=True,
        timeout=600,
        env={**__import__("os").environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    assert re.search(
        r"^PASS train-pace-Qwen2\.5-1\.5B: 2/28 layers \(small widths\), sdpa attention, \d+ rows = "
        r"[\d,]+ real tokens .* [\d,]+ real tokens/s, .*MFU n/a",
        out.stdout,
        re.M,
    ), out.stdout


def test_bf16_peaks() -> None:
    assert gpu_checks.bf16_peak("NVIDIA H100 80GB HBM3") == 989e12
    assert gpu_checks.bf16_peak("NVIDIA H200") == 989e12
    assert gpu_checks.bf16_peak("Tesla T4") is None
