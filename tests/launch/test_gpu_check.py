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


def _fake_cuda(tmp_path: Path, pytest_rc: int, torchrun_rc: int, failing: str = "") -> dict[str, str]:
    """torch sees 2 fake GPUs; `python -m pytest` and `python tools/gpu_checks.py CHECK` are
    stand-ins (the check named `failing` prints a FAIL line and exits 1); torchrun exits torchrun_rc."""
    (tmp_path / "sitecustomize.py").write_text(
        "import torch\n"
        "torch.cuda.is_available = lambda: True\n"
        "torch.cuda.device_count = lambda: 2\n"
        "torch.cuda.get_device_name = lambda i=0: 'FakeGPU'\n"
    )
    summary = "PASSED tests/x.py::test_a\\nFAILED tests/x.py::test_b - boom\\nSKIPPED [1] tests/x.py:9: why\\n"
    python = _exe(tmp_path / "python", (
        "#!/usr/bin/env bash\n"
        f'if [[ "$1" == -m && "$2" == pytest ]]; then printf "{summary}"; exit {pytest_rc}; fi\n'
        'if [[ "$1" == tools/gpu_checks.py ]]; then\n'
        '  name="$2"; [[ "$2" == job ]] && name="$7"\n'
        f'  if [[ "$name" == "{failing}" ]]; then echo "FAIL $name: broken"; exit 1; fi\n'
        '  echo "PASS $name: fake figure"; exit 0\n'
        "fi\n"
        f'PYTHONPATH={tmp_path} exec {sys.executable} "$@"\n'
    ))
    torchrun = _exe(tmp_path / "torchrun", f"#!/usr/bin/env bash\necho fake torchrun \"$@\"\nexit {torchrun_rc}\n")
    return {"PYTHON": str(python), "TORCHRUN": str(torchrun)}


def _lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(("PASS ", "FAIL "))]


def test_every_check_reports_one_line_and_a_failed_test_fails(tmp_path: Path) -> None:
    res = _run(_fake_cuda(tmp_path, pytest_rc=1, torchrun_rc=0))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "2 x FakeGPU" in res.stdout
    report = res.stdout.split("== gpu_check report")[1]
    names = [line.split()[1].rstrip(":") for line in _lines(report)]
    assert names == ["gpu-tests", "engine", "sglang", "train", "nccl-shift", "main-job"]
    assert "FAIL gpu-tests: 1 passed, 1 failed, 0 errors, 1 skipped" in report
    assert "--nproc-per-node 2 pivot/main.py --cluster.device cuda --train.steps 3" in res.stdout


def test_all_pass_exits_0(tmp_path: Path) -> None:
    res = _run(_fake_cuda(tmp_path, pytest_rc=0, torchrun_rc=0))
    assert res.returncode == 0, res.stdout + res.stderr
    assert all(line.startswith("PASS") for line in _lines(res.stdout))


def test_failed_check_or_job_fails_the_run(tmp_path: Path) -> None:
    res = _run(_fake_cuda(tmp_path, pytest_rc=0, torchrun_rc=0, failing="sglang"))
    assert res.returncode == 1 and "FAIL sglang: broken" in res.stdout.split("== gpu_check report")[1]
    res = _run(_fake_cuda(tmp_path, pytest_rc=0, torchrun_rc=3))
    report = res.stdout.split("== gpu_check report")[1]
    assert res.returncode == 1 and "FAIL main-job-run: exit 3" in report and "FAIL nccl-shift-run: exit 3" in report
