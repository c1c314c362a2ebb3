"""tools/gpu_check.sh: syntax, the no-CUDA exit, and its report on a faked CUDA machine
(torch.cuda patched in, pytest and torchrun replaced by stand-ins with canned results)."""
from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "gpu_check.sh"
BASH = shutil.which("bash") or "/bin/bash"


def _exe(path: Path, body: str) -> Path:
    path.write_text(body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def _run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GPU_CHECK_", "NPROC", "TORCHRUN", "PYTHON"))}
    return subprocess.run([BASH, str(SCRIPT)], env={**base, **env}, capture_output=True, text=True, timeout=120)


def test_syntax() -> None:
    subprocess.run([BASH, "-n", str(SCRIPT)], check=True)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA present: the script would run the real check")
def test_without_cuda_says_so_and_exits_0() -> None:
    res = _run({})
    assert res.returncode == 0, res.stderr
    assert "no CUDA" in res.stdout


def _fake_cuda(tmp_path: Path, pytest_rc: int, smoke_rc: int) -> dict[str, str]:
    (tmp_path / "sitecustomize.py").write_text(
        "import torch\n"
        "torch.cuda.is_available = lambda: True\n"
        "torch.cuda.device_count = lambda: 8\n"
        "torch.cuda.get_device_name = lambda i=0: 'FakeGPU'\n"
    )
    summary = "PASSED tests/x.py::test_a\\nFAILED tests/x.py::test_b - boom\\nSKIPPED [1] tests/x.py:9: why\\n"
    python = _exe(tmp_path / "python", (
        "#!/usr/bin/env bash\n"
        f'if [[ "$1" == -m && "$2" == pytest ]]; then printf "{summary}"; exit {pytest_rc}; fi\n'
        f'PYTHONPATH={tmp_path} exec {sys.executable} "$@"\n'
    ))
    torchrun = _exe(tmp_path / "torchrun", f"#!/usr/bin/env bash\necho fake torchrun \"$@\"\nexit {smoke_rc}\n")
    return {"PYTHON": str(python), "TORCHRUN": str(torchrun)}


def test_report_counts_and_fails_on_failed_test(tmp_path: Path) -> None:
    res = _run(_fake_cuda(tmp_path, pytest_rc=1, smoke_rc=0))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "8 x FakeGPU" in res.stdout
    assert "1 passed, 1 failed, 0 errors, 1 skipped" in res.stdout
    assert "  FAILED tests/x.py::test_b" in res.stdout
    assert "smoke: passed" in res.stdout
    assert "--nproc-per-node 4" in res.stdout


def test_failed_smoke_fails_the_check(tmp_path: Path) -> None:
    res = _run(_fake_cuda(tmp_path, pytest_rc=0, smoke_rc=3))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "smoke: FAILED (exit 3" in res.stdout
