"""The dress rehearsal of every paper preset (tools/rehearse.py): the preset's families in the
hub's layouts, its engines (vLLM's CPU build for the Qwen3-MoE judges), bf16, its judge prompt,
through the sbatch template with stand-in srun/scontrol, on 4 CPU ranks; each ends clean:
exactly once, inference replicas shifted, the rollout/trainer mismatch within its bound, every
unparsable verdict counted and scored by the fallback. `--kill-engine-core` (a judge's vLLM engine
core SIGKILLed once the judge serves) is run by hand, not here: the suite kills a vLLM core in
tests/runtime/test_vllm_job.py (one adapter serves both roles) and fails judges in place in
tests/runtime/test_recovery.py; here it took about 60 s of a worker's time."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from configs.presets import PAPER_WORLD, get_preset
from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))

import rehearse  # noqa: E402

pytestmark = pytest.mark.slow  # 16-77 s each on 2 cores


@pytest.mark.parametrize("preset", list(PAPER_WORLD))
def test_preset_rehearses_clean(
    preset: str, tmp_path: Path, request: pytest.FixtureRequest, capsys: pytest.CaptureFixture[str]
) -> None:
    if get_preset(preset).reward.engine.backend == "vllm":
        request.getfixturevalue("vllm_python")  # built once per session, or skipped offline
    rc = rehearse.main(["--preset", preset, "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert rc == 0, out[-4000:] + (tmp_path / preset / "job.out").read_text()[-4000:]
    assert f"rehearse: {preset}: clean" in out
    assert "exactly once: 0 violations" in out
    job = (tmp_path / preset / "job.out").read_text()
    # the template's preflight ran first, then torchrun: the order a user's job takes
    lines = [line for line in job.splitlines() if line.startswith("+ srun")]
    assert "--dry-run" in lines[0] and "torch.distributed.run" in lines[1]
    assert "pivot: done" in job
