"""Config checks of the GPU kernels and the sglang backend: refused at parse time or at start-up
with one line naming the field, never at the first step."""

from __future__ import annotations

import sys
from types import ModuleType

import pytest

from pivot.cli import parse
from pivot.config import ConfigError, ModelConfig
from pivot.kernels import missing_kernels
from pivot.main import main


def test_flash_attention_needs_half_precision() -> None:
    """flash-attn has fp16/bf16 kernels only: float32 (the default dtype) is refused up front."""
    with pytest.raises(
        ConfigError, match=r"model\.attention='flash': needs --model\.dtype bfloat16 or float16"
    ):
        parse(["--model.attention", "flash"], 4, 4)
    assert (
        parse(["--model.attention", "flash", "--model.dtype", "float16"], 4, 4).model.dtype
        == "float16"
    )


def test_verify_weights_is_refused_with_sglang() -> None:
    with pytest.raises(ConfigError, match=r"log\.verify_weights=True: reward served by sglang"):
        parse(["--log.verify-weights", "--reward.engine.backend", "sglang"], 4, 4)
    assert parse(["--log.verify-weights"], 4, 4).log.verify_weights


def test_missing_kernels_name_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "flash_attn", None)  # import fails as if not installed
    monkeypatch.setitem(sys.modules, "transformer_engine.pytorch", None)
    lines = missing_kernels(ModelConfig(attention="flash", dtype="bfloat16", linear="te"))
    assert (
        len(lines) == 2
        and "flash-attn==2.8.3" in lines[0]
        and "transformer-engine[pytorch]==2.9.0" in lines[1]
    )
    assert all("docs/gpu.md" in line for line in lines)
    assert missing_kernels(ModelConfig()) == []
    fake = ModuleType("flash_attn")
    fake.flash_attn_varlen_func = lambda *a, **k: None
    monkeypatch.setitem(sys.modules, "flash_attn", fake)
    assert missing_kernels(ModelConfig(attention="flash", dtype="bfloat16")) == []


def test_main_stops_before_torchrun_work_when_a_kernel_is_missing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "flash_attn", None)
    monkeypatch.setenv("WORLD_SIZE", "4")
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert main(["--model.attention", "flash", "--model.dtype", "bfloat16"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "pivot: cannot start: --model.attention flash needs flash-attn==2.8.3"
    )
