"""Launchers: syntax, the exact torchrun line each one renders, and the sbatch script's real
(non-dry) path with `srun`/`scontrol` replaced by recording stand-ins."""

from __future__ import annotations

import os
import shlex
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOCAL = ROOT / "launch" / "local.sh"
SBATCH = ROOT / "launch" / "slurm" / "pivot.sbatch"
BASH = shutil.which("bash") or "/bin/bash"
FLAGS = ["--preset", "qwen2.5-7b+qwen3-30b-a3b", "--train.steps", "100"]


def _run(script: Path, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "PIVOT_", "NPROC", "GPUS_PER_NODE", "TORCHRUN"))
    }
    return subprocess.run(
        [BASH, str(script), *args], env={**base, **env}, capture_output=True, text=True, timeout=60
    )


def _rendered(out: str) -> list[str]:
    """The launch line a script printed (the sbatch template's last, after its preflight's)."""
    lines = [line for line in out.splitlines() if line.startswith("+ ")]
    assert lines, out
    return shlex.split(lines[-1][2:])


def _opt(cmd: list[str], name: str) -> str:
    assert cmd.count(name) == 1, f"{name} in {cmd}"
    return cmd[cmd.index(name) + 1]


def _slurm_env(**extra: str) -> dict[str, str]:
    env = {
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": "gpu-a01,gpu-a02",
        "SLURM_NNODES": "2",
        "SLURM_GPUS_ON_NODE": "8",
        "SLURM_SUBMIT_DIR": str(ROOT),
    }
    return {**env, **extra}


@pytest.mark.parametrize("script", [LOCAL, SBATCH], ids=["local.sh", "pivot.sbatch"])
def test_bash_syntax(script: Path) -> None:
    subprocess.run(["bash", "-n", str(script)], check=True)


def test_sbatch_renders_two_nodes_by_eight() -> None:
    res = _run(SBATCH, FLAGS, _slurm_env(PIVOT_DRY_RUN="1"))
    assert res.returncode == 0, res.stderr
    cmd = _rendered(res.stdout)
    assert cmd[0] == "srun" and "--ntasks-per-node=1" in cmd
    tr = cmd.index("torchrun")
    torchrun = cmd[tr:]
    assert _opt(torchrun, "--nnodes") == "2"
    assert _opt(torchrun, "--nproc-per-node") == "8"
    assert _opt(torchrun, "--rdzv-backend") == "c10d"
    assert _opt(torchrun, "--rdzv-endpoint") == "gpu-a01:29500"
    assert _opt(torchrun, "--rdzv-id") == "4242"
    assert _opt(torchrun, "--max-restarts") == "3"  # a dead rank restarts the job ...
    main = torchrun.index(str(ROOT / "pivot" / "main.py"))
    assert torchrun[main + 1 :] == [
        "--checkpoint.resume",
        "auto",
        *FLAGS,
    ]  # ... from the newest complete checkpoint


def test_sbatch_knobs() -> None:
    env = _slurm_env(
        PIVOT_DRY_RUN="1",
        PIVOT_MAX_RESTARTS="3",
        PIVOT_RDZV_PORT="31000",
        SLURM_GPUS_PER_NODE="h200:4",
        SLURM_NNODES="3",
        SLURM_JOB_NODELIST="n7,n8,n9",
    )
    del env["SLURM_GPUS_ON_NODE"]
    cmd = _rendered(_run(SBATCH, ["--train.steps", "1 0"], env).stdout)
    assert _opt(cmd, "--max-restarts") == "3"
    assert _opt(cmd, "--rdzv-endpoint") == "n7:31000"
    assert _opt(cmd, "--nproc-per-node") == "4"
    assert _opt(cmd, "--nnodes") == "3"
    assert cmd[-2:] == ["--train.steps", "1 0"]
    cmd = _rendered(
        _run(SBATCH, ["--checkpoint.resume", "yes"], {**env, "PIVOT_RESUME": "no"}).stdout
    )
    assert cmd[-4:] == [
        "--checkpoint.resume",
        "no",
        "--checkpoint.resume",
        "yes",
    ]  # the last one wins


def test_sbatch_needs_scontrol_for_compressed_nodelist(tmp_path: Path) -> None:
    # An empty PATH hides any real scontrol; the dry path needs only bash builtins.
    res = _run(
        SBATCH,
        [],
        _slurm_env(PIVOT_DRY_RUN="1", SLURM_JOB_NODELIST="gpu[01-02]", PATH=str(tmp_path)),
    )
    assert res.returncode != 0 and "scontrol" in res.stderr


def test_sbatch_outside_slurm_fails_clearly() -> None:
    res = _run(SBATCH, [], {})
    assert res.returncode != 0 and "SLURM_JOB_ID" in res.stderr


def _stub(path: Path, body: str) -> None:
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def test_sbatch_real_path_calls_srun_once(tmp_path: Path) -> None:
    """Not a dry run: scontrol expands a compressed list, srun receives the printed line."""
    _stub(tmp_path / "scontrol", "echo node-x17; echo node-x18\n")
    record = tmp_path / "srun.args"
    _stub(tmp_path / "srun", f'printf "%s\\n" srun "$@" "" >> {shlex.quote(str(record))}\n')
    env = _slurm_env(SLURM_JOB_NODELIST="node-x[17-18]", PATH=f"{tmp_path}:{os.environ['PATH']}")
    (tmp_path / "pivot").mkdir()
    (tmp_path / "pivot" / "main.py").write_text("")
    env["PIVOT_ROOT"] = str(tmp_path)
    env["HOME"] = str(tmp_path / "home")  # the job secret's file is made here, not in the real home
    res = _run(SBATCH, FLAGS, env)
    assert res.returncode == 0, res.stderr
    preflight, called = [c.strip("\n").split("\n") for c in record.read_text().split("\n\n")[:2]]
    assert called == _rendered(res.stdout)
    assert _opt(called, "--rdzv-endpoint") == "node-x17:29500"
    # first, once, on one node: the dry run of the job's shape with the same flags
    assert preflight[:6] == ["srun", "--nodes", "1", "--ntasks", "1", "python"]
    assert preflight[7:] == [
        "--dry-run",
        "--cluster.nnodes",
        "2",
        "--cluster.devices-per-node",
        "8",
        *FLAGS,
    ]


def test_sbatch_makes_a_per_job_secret_from_a_private_file(tmp_path: Path) -> None:
    record = tmp_path / "srun.env"
    _stub(tmp_path / "srun", f'printf "%s" "$PIVOT_JOB_SECRET" > {shlex.quote(str(record))}\n')
    (tmp_path / "pivot").mkdir()
    (tmp_path / "pivot" / "main.py").write_text("")
    home = tmp_path / "home"
    env = _slurm_env(
        PATH=f"{tmp_path}:{os.environ['PATH']}", PIVOT_ROOT=str(tmp_path), HOME=str(home)
    )
    assert _run(SBATCH, [], env).returncode == 0
    secret_file = home / ".pivot" / "job_secret"
    assert (
        stat.S_IMODE(secret_file.stat().st_mode) == 0o600
        and stat.S_IMODE(secret_file.parent.stat().st_mode) == 0o700
    )
    file_secret = secret_file.read_bytes()
    assert len(file_secret) == 64 and int(file_secret, 16) >= 0
    import hashlib

    first = record.read_text()
    assert (
        first == hashlib.sha256(file_secret + b"|pivot-job|4242").hexdigest()
    )  # the srun environment has it
    assert _run(SBATCH, [], {**env, "SLURM_JOB_ID": "4243"}).returncode == 0
    assert (
        record.read_text() not in ("", first) and secret_file.read_bytes() == file_secret
    )  # per job, same file
    assert _run(SBATCH, [], {**env, "PIVOT_JOB_SECRET": "given-one-0123456789"}).returncode == 0
    assert record.read_text() == "given-one-0123456789"
    secret_file.chmod(0o644)
    res = _run(SBATCH, [], env)
    assert (
        res.returncode == 2
        and "must be yours with mode 600" in res.stderr
        and res.stderr.count("\n") == 1
    )


def test_local_renders(tmp_path: Path) -> None:
    res = _run(LOCAL, FLAGS, {"NPROC": "2", "PIVOT_DRY_RUN": "1"})
    assert res.returncode == 0, res.stderr
    cmd = _rendered(res.stdout)
    assert (
        "--standalone" in cmd
        and _opt(cmd, "--nproc-per-node") == "2"
        and _opt(cmd, "--max-restarts") == "0"
    )
    assert cmd[cmd.index(str(ROOT / "pivot" / "main.py")) + 1 :] == [
        "--checkpoint.resume",
        "auto",
        *FLAGS,
    ]


def test_local_default_nproc_follows_nvidia_smi(tmp_path: Path) -> None:
    _stub(
        tmp_path / "nvidia-smi",
        'for i in 0 1 2; do echo "GPU $i: NVIDIA H200 (UUID: GPU-$i)"; done\n',
    )
    path = f"{tmp_path}:{os.environ['PATH']}"
    cmd = _rendered(_run(LOCAL, [], {"PIVOT_DRY_RUN": "1", "PATH": path}).stdout)
    assert _opt(cmd, "--nproc-per-node") == "3"
    _stub(tmp_path / "nvidia-smi", "exit 9\n")
    cmd = _rendered(_run(LOCAL, [], {"PIVOT_DRY_RUN": "1", "PATH": path}).stdout)
    assert _opt(cmd, "--nproc-per-node") == "4"


@pytest.mark.slow
@pytest.mark.skipif(
    not (ROOT / "pivot" / "main.py").exists(), reason="pivot/main.py not written yet"
)
def test_local_runs_main_help() -> None:
    """The launcher really starts torchrun and main.py (`--help` exits before any process group)."""
    res = _run(LOCAL, ["--help"], {"NPROC": "1"})
    assert res.returncode == 0, res.stdout + res.stderr
    assert "--train.steps" in res.stdout
