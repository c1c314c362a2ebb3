"""A production engine the config asks for is checked before any process group starts: one line
naming what to install or change, exit code 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import pivot.engine.backends.install as install
import pivot.engine_check as check
from configs.presets import get_preset
from tests.conftest import ROOT
from tests.runtime.models import random_models


def problems(
    monkeypatch: pytest.MonkeyPatch, found: tuple[str, str] | None, **model: str
) -> list[str]:
    monkeypatch.setattr(install, "installed_vllm", lambda: found)
    cfg = get_preset("tiny-cpu")
    cfg.reward.engine.backend = "vllm"
    for name, value in model.items():
        setattr(cfg.model, name, value)
    return check.engine_problems(cfg)


def test_missing_or_other_vllm_names_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    (line,) = problems(monkeypatch, None)
    assert line.startswith("--reward.engine.backend vllm needs vLLM 0.32.0, which is not installed")
    assert "requirements-vllm-cpu.txt" in line and "pip install vllm==0.32.0" in line
    (line,) = problems(monkeypatch, ("vllm", "0.31.1"))
    assert "needs vLLM 0.32.0, found vllm 0.31.1" in line


def test_cpu_build_refuses_head_sizes_it_has_no_kernel_for(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (line,) = problems(monkeypatch, ("vllm-cpu", "0.32.0"))  # the shipped tiny GenRM: head_dim 16
    assert "vLLM's CPU attention takes head sizes 32, 64" in line and "has head_dim 16" in line
    policy, genrm = random_models(tmp_path, head_dim=32)
    assert problems(monkeypatch, ("vllm-cpu", "0.32.0+cpu"), genrm=str(genrm)) == []
    assert problems(monkeypatch, ("vllm", "0.32.0")) == []  # the CUDA build: its kernels take 16


@pytest.mark.slow
def test_main_exits_2_with_one_line_when_vllm_is_missing() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "pivot" / "main.py"), "--rollout.engine.backend", "vllm"],
        capture_output=True,
        text=True,
        env={"WORLD_SIZE": "4", "LOCAL_WORLD_SIZE": "4", "RANK": "0", "PATH": ""},
    )
    assert out.returncode == 2
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("pivot: cannot start: --rollout.engine.backend vllm needs vLLM 0.32.0")
