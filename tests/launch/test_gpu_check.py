"""tools/gpu_check.sh: syntax, no network, its environment probe (no GPU: SKIP and exit 0; no
python, a broken or too old torch, a GPU torch cannot use: FAIL and exit 1), and its report on a
faked CUDA machine (torch.cuda patched in, nvidia-smi, pytest and torchrun replaced by stand-ins
with canned results)."""

from __future__ import annotations

import os
import re
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


NO_GPU = {"NVIDIA_SMI": "/nonexistent/nvidia-smi", "GPU_CHECK_DEV": "/nonexistent/nvidia0"}


def _run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GPU_CHECK_", "NPROC", "TORCHRUN", "PYTHON", "NVIDIA_SMI"))
    }
    return subprocess.run(
        [BASH, str(SCRIPT)],
        env={**base, **NO_GPU, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _smi(tmp_path: Path) -> str:
    """An nvidia-smi that lists one GPU."""
    return str(
        _exe(
            tmp_path / "nvidia-smi",
            "#!/usr/bin/env bash\necho 'GPU 0: NVIDIA H200 (UUID: GPU-0)'\n",
        )
    )


def _site(tmp_path: Path, body: str) -> dict[str, str]:
    """Run the real interpreter with `body` as sitecustomize (patching torch before the probe)."""
    (tmp_path / "sitecustomize.py").write_text(body)
    return {"PYTHONPATH": str(tmp_path), "PYTHON": sys.executable}


def test_syntax() -> None:
    subprocess.run([BASH, "-n", str(SCRIPT)], check=True)


def test_never_installs_from_the_network() -> None:
    text = "\n".join(
        line for line in SCRIPT.read_text().splitlines() if not line.lstrip().startswith("#")
    )
    for word in ("pip install", "pip download", "curl ", "wget ", "uv pip", "conda install"):
        assert word not in text, word


@pytest.mark.skipif(
    torch.cuda.is_available(), reason="CUDA present: the script would run the real check"
)
@pytest.mark.slow
def test_without_a_gpu_says_so_and_exits_0() -> None:
    res = _run({"PYTHON": sys.executable})
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.splitlines()[-1].startswith("SKIP cuda: no NVIDIA GPU on this machine")
    assert res.stdout.splitlines()[0].startswith(f"PASS torch: {torch.__version__}")


def test_a_missing_python_fails() -> None:
    res = _run({"PYTHON": "/nonexistent/python3"})
    assert res.returncode == 1 and res.stdout.startswith(
        "FAIL python: '/nonexistent/python3' not found"
    )


def test_a_torch_that_does_not_import_fails(tmp_path: Path) -> None:
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(
        "raise ImportError('libcudart.so.13: cannot open shared object file')\n"
    )
    res = _run({"PYTHONPATH": str(tmp_path), "PYTHON": sys.executable})
    assert res.returncode == 1, res.stdout
    assert res.stdout.strip() == (
        f"FAIL torch: {sys.executable} cannot import torch: "
        "ImportError: libcudart.so.13: cannot open shared object file"
    )


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA present")
@pytest.mark.slow
def test_a_gpu_torch_cannot_use_fails(tmp_path: Path) -> None:
    """nvidia-smi lists a GPU, torch sees none: a CPU-only torch, or a driver too old for torch's
    CUDA build (torch warns and answers False), is a FAIL, not 'nothing to check'."""
    res = _run({**_site(tmp_path, ""), "NVIDIA_SMI": _smi(tmp_path)})
    assert res.returncode == 1 and "FAIL cuda: 1 GPU(s) listed by" in res.stdout
    assert (
        "is a CPU-only build"
        if torch.version.cuda is None
        else f"(CUDA {torch.version.cuda}) cannot use it"
    ) in res.stdout
    old_driver = (
        "import warnings, torch\n"
        "torch.version.cuda = '13.0'\n"
        "def _no():\n"
        "    warnings.warn('CUDA initialization: The NVIDIA driver on your system is too old (found version 12040).')\n"
        "    return False\n"
        "torch.cuda.is_available = _no\n"
    )
    res = _run({**_site(tmp_path, old_driver), "NVIDIA_SMI": _smi(tmp_path)})
    assert res.returncode == 1, res.stdout
    assert (
        "(CUDA 13.0) cannot use it" in res.stdout
        and "driver on your system is too old" in res.stdout
    )


@pytest.mark.slow
def test_a_torch_older_than_2_11_fails(tmp_path: Path) -> None:
    res = _run({**_site(tmp_path, "import torch\ntorch.__version__ = '2.10.0+cu128'\n")})
    assert res.returncode == 1 and "FAIL torch: 2.10.0+cu128 is older than 2.11" in res.stdout


def _fake_cuda(
    tmp_path: Path, pytest_rc: int, torchrun_rc: int, failing: str = ""
) -> dict[str, str]:
    """torch sees 2 fake GPUs; `python -m pytest` and `python tools/gpu_checks.py CHECK` are
    stand-ins (the check named `failing` prints a FAIL line and exits 1); torchrun exits torchrun_rc."""
    (tmp_path / "sitecustomize.py").write_text(
        "import torch\n"
        "torch.version.cuda = torch.version.cuda or '13.0'\n"
        "torch.cuda.is_available = lambda: True\n"
        "torch.cuda.device_count = lambda: 2\n"
        "torch.cuda.get_device_name = lambda i=0: 'FakeGPU'\n"
    )
    summary = "PASSED tests/x.py::test_a\\nFAILED tests/x.py::test_b - boom\\nSKIPPED [1] tests/x.py:9: why\\n"
    python = _exe(
        tmp_path / "python",
        (
            "#!/usr/bin/env bash\n"
            f'if [[ "$1" == -m && "$2" == pytest ]]; then printf "{summary}"; exit {pytest_rc}; fi\n'
            'if [[ "$1" == tools/gpu_checks.py ]]; then\n'
            '  name="$2"; [[ "$2" == job ]] && name="$7"\n'
            f'  if [[ "$name" == "{failing}" ]]; then echo "FAIL $name: broken"; exit 1; fi\n'
            '  echo "PASS $name: fake figure"; exit 0\n'
            "fi\n"
            'if [[ "$1" == tools/bench_decode.py ]]; then echo "PASS decode-step: fake"; exit 0; fi\n'
            f'PYTHONPATH={tmp_path} exec {sys.executable} "$@"\n'
        ),
    )
    torchrun = _exe(
        tmp_path / "torchrun", f'#!/usr/bin/env bash\necho fake torchrun "$@"\nexit {torchrun_rc}\n'
    )
    return {"PYTHON": str(python), "TORCHRUN": str(torchrun), "NVIDIA_SMI": _smi(tmp_path)}


def _lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(("PASS ", "FAIL ", "SKIP "))]


@pytest.mark.slow
def test_every_check_reports_one_line_and_a_failed_test_fails(tmp_path: Path) -> None:
    res = _run(_fake_cuda(tmp_path, pytest_rc=1, torchrun_rc=0))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "2 x FakeGPU" in res.stdout
    report = res.stdout.split("== gpu_check report")[1]
    names = [line.split()[1].rstrip(":") for line in _lines(report)]
    assert names == [
        "torch",
        "cuda",
        "gpu-tests",
        "engine",
        "numerics",
        "decode-step",
        "sglang",
        "vllm",
        "train",
        "nccl-shift",
        "main-job",
    ]
    assert "FAIL gpu-tests: 1 passed, 1 failed, 0 errors, 1 skipped" in report
    assert "--nproc-per-node 2 pivot/main.py --cluster.device cuda --train.steps 3" in res.stdout


@pytest.mark.slow
def test_all_pass_exits_0(tmp_path: Path) -> None:
    res = _run(_fake_cuda(tmp_path, pytest_rc=0, torchrun_rc=0))
    assert res.returncode == 0, res.stdout + res.stderr
    assert all(line.startswith("PASS") for line in _lines(res.stdout))


@pytest.mark.slow
def test_failed_check_or_job_fails_the_run(tmp_path: Path) -> None:
    res = _run(_fake_cuda(tmp_path, pytest_rc=0, torchrun_rc=0, failing="sglang"))
    assert (
        res.returncode == 1 and "FAIL sglang: broken" in res.stdout.split("== gpu_check report")[1]
    )
    res = _run(_fake_cuda(tmp_path, pytest_rc=0, torchrun_rc=3))
    report = res.stdout.split("== gpu_check report")[1]
    assert (
        res.returncode == 1
        and "FAIL main-job-run: exit 3" in report
        and "FAIL nccl-shift-run: exit 3" in report
    )


# what the GPU image lacks of Pivot's test and run requirements (it has torch, transformers, pytest)
NOT_ON_THE_GPU_IMAGE = (
    "hypothesis", "tyro", "zmq", "msgspec", "pyarrow", "rich", "tensorboard", "xdist",
)  # fmt: skip
BLOCKER = """
import sys
BLOCKED = set({blocked!r})
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}} (not on the GPU image)", name=name)
sys.meta_path.insert(0, Blocker())
"""


def _gpu_collected(markexpr: str, env: dict[str, str]) -> tuple[int, set[str], str]:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=", "-m",
         markexpr, "--collect-only", "-q"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    ids = {line.split("::")[0] for line in out.stdout.splitlines() if "::" in line}
    files = {  # `-q` lists "path.py: count"
        line.rsplit(":", 1)[0]
        for line in out.stdout.splitlines()
        if re.fullmatch(r"\S+\.py: \d+", line)
    }
    return out.returncode, ids | files, out.stdout + out.stderr


@pytest.mark.slow
def test_the_gpu_tests_collect_on_an_image_without_the_dev_packages(tmp_path: Path) -> None:
    """`pytest -o addopts= -m gpu` (gpu_check.sh's gpu-tests line) on an image with only torch,
    transformers and pytest: pytest-xdist (which pyproject.toml's addopts name), hypothesis,
    tyro, pyzmq, msgspec and the rest made unimportable by a meta-path
    blocker. It collects without an error, and the GPU tests it collects are the ones the full
    environment collects (the oracle: a mark expression the GPU-only shortcut does not take)."""
    (tmp_path / "sitecustomize.py").write_text(BLOCKER.format(blocked=NOT_ON_THE_GPU_IMAGE))
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "OMP_NUM_THREADS": "1"}
    probe = subprocess.run(
        [sys.executable, "-c", "import hypothesis"], env=env, capture_output=True
    )
    assert probe.returncode != 0  # the blocker works
    rc, bare, log = _gpu_collected("gpu", env)
    assert rc == 0 and "error" not in log.lower(), log[-3000:]
    rc, full, log = _gpu_collected("(gpu)", {**os.environ, "OMP_NUM_THREADS": "1"})
    assert rc == 0, log[-3000:]
    assert bare == full and "tests/engine/test_decode_graphs.py" in bare, (bare, full)
