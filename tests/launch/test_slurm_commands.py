"""Every `sbatch` command README.md, docs/ and the template's header show, run as Slurm would run
it: `SLURM_*` set as sbatch sets them, `scontrol` and `srun` replaced by stand-ins, on 2, 4 and 8
nodes of 80 GB and 96 GB devices. Each either passes the preflight (the dry run of the job's
shape, once, on the first node) and starts torchrun on every node, or stops in the preflight
with exit 2 and the fewest nodes that fit; nothing is started then.

The preflight line the template prints is run in-process (`pivot.main.main`, the program srun
would start): a subprocess per case would cost a torch import each. Two cases go through the
template's real path, srun executing the preflight for real."""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from configs.presets import PAPER_WORLD
from pivot.main import main
from tests.model.fixtures.hub_layouts import write_header_only
from tests.model.fixtures.hub_models import MODELS

ROOT = Path(__file__).resolve().parents[2]
SBATCH = ROOT / "launch" / "slurm" / "pivot.sbatch"
BASH = shutil.which("bash") or "/bin/bash"
MODEL_FLAGS = ("--model.policy", "--model.genrm")

# The fewest 8-GPU nodes each paper preset fits on, with the hub's real shapes (header-only
# folders); docs/multinode.md's table says the same.
FEWEST = {
    ("qwen2.5-1.5b+glm-z1-9b", 80): 1,
    ("qwen2.5-1.5b+glm-z1-9b", 96): 1,
    ("qwen2.5-7b+qwen3-30b-a3b", 80): 2,
    ("qwen2.5-7b+qwen3-30b-a3b", 96): 2,
    ("qwen2.5-32b+qwen3-30b-a3b", 80): 3,
    ("qwen2.5-32b+qwen3-30b-a3b", 96): 2,
    ("qwen2.5-72b+qwen3.5-122b-a10b", 80): 8,
    ("qwen2.5-72b+qwen3.5-122b-a10b", 96): 6,
}


def documented_commands() -> list[tuple[str, list[str]]]:
    """(where, argv after `sbatch`) of every sbatch command in README.md, docs/*.md and the
    template's header: a line starting `sbatch` (or `#   sbatch`), continued over `\\` ends."""
    sources = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), SBATCH]
    out = []
    for path in sources:
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            text = re.sub(r"^#\s+", "", line) if path == SBATCH else line.lstrip()
            if not text.startswith("sbatch "):
                continue
            command, j = text, i
            while command.rstrip().endswith("\\"):
                j += 1
                command = command.rstrip()[:-1] + " " + lines[j]
            command = command.split(" # ")[0]  # a trailing comment
            out.append((f"{path.relative_to(ROOT)}:{i + 1}", shlex.split(command)[1:]))
    return out


COMMANDS = documented_commands()


def _check_folder_once() -> Callable[[Path], None]:
    from pivot.model.hf_folder import check_folder

    return functools.cache(check_folder)


_CHECKED = _check_folder_once()


def split(argv: list[str]) -> tuple[int | None, list[str]]:
    """(the --nodes sbatch was given, the flags after the script name)."""
    script = argv.index("launch/slurm/pivot.sbatch")
    opts, flags, nodes = argv[:script], argv[script + 1 :], None
    for k, opt in enumerate(opts):
        if opt in ("--nodes", "-N"):
            nodes = int(opts[k + 1])
        elif opt.startswith("--nodes="):
            nodes = int(opt.split("=", 1)[1])
    return nodes, flags


def preset_of(flags: list[str]) -> str:
    return flags[flags.index("--preset") + 1]


@pytest.fixture(autouse=True)
def check_each_folder_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The preflight checks a model folder by building its model on the meta device (about a
    second for a 128-expert judge): the same folders' verdicts are kept across this file's
    cases, as if the same preflight were asked again."""
    from pivot.model import hf_folder

    monkeypatch.setattr(hf_folder, "check_folder", _CHECKED)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stand-in for the cluster's shared filesystem: every model the presets name, header-only
    in the hub's layout, under models/; other absolute paths the docs name land beside it."""
    root = tmp_path_factory.mktemp("cluster")
    for name in MODELS:
        write_header_only(name, root / "models" / name)
    return root


# the user's own files a documented command names, as the user would have written them
USER_FILES = {
    "--data.path": json.dumps(
        {"prompt": [{"role": "user", "content": "1+1=?"}], "reward_model": {"ground_truth": "2"}}
    )
    + "\n",
    "--reward.judge-template-file": "Grade it.\n{question}\n{response}\nEnd with Score: S\n",
}


def on_cluster(flags: list[str], root: Path) -> list[str]:
    """The documented flags with their paths moved onto the stand-in filesystem, where the
    user's own files they name are written."""
    out = []
    for k, flag in enumerate(flags):
        before = flags[k - 1] if k else ""
        if before in MODEL_FLAGS:
            flag = str(root / "models" / Path(flag).name)
        elif flag.startswith("/"):
            flag = str(root / flag.lstrip("/"))
            if before in USER_FILES:
                Path(flag).parent.mkdir(parents=True, exist_ok=True)
                Path(flag).write_text(USER_FILES[before])
        out.append(flag)
    return out


def slurm_env(nodes: int, **extra: str) -> dict[str, str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SLURM_", "PIVOT_", "GPUS_PER_NODE", "TORCHRUN"))
    }
    return {
        **base,
        "SLURM_JOB_ID": "91",
        "SLURM_JOB_NODELIST": f"gpu[01-{nodes:02d}]",
        "SLURM_NNODES": str(nodes),
        "SLURM_GPUS_ON_NODE": "8",
        "SLURM_CPUS_ON_NODE": "96",
        "SLURM_SUBMIT_DIR": str(ROOT),
        **extra,
    }


def stub(path: Path, body: str) -> None:
    path.write_text("#!/usr/bin/env bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def stand_ins(folder: Path, nodes: int) -> str:
    """scontrol expanding `gpu[01-NN]`, srun recording each call; a PATH holding them first."""
    folder.mkdir(parents=True, exist_ok=True)
    names = "; ".join(f"echo gpu{n:02d}" for n in range(1, nodes + 1))
    stub(folder / "scontrol", f"{names}\n")
    # the preflight (`srun --nodes 1 --ntasks 1 python ...`) runs; the torchrun line is recorded
    stub(
        folder / "srun",
        f'printf "%s\\n" "$@" "" >> {shlex.quote(str(folder / "srun.calls"))}\n'
        'if [[ "$*" == *--dry-run* ]]; then shift 4; exec "$@"; fi\n',
    )
    return f"{folder}:{os.environ['PATH']}"


def render(flags: list[str], nodes: int) -> tuple[list[str], list[str]]:
    """(preflight line, torchrun line) the template prints for `nodes` nodes."""
    res = subprocess.run(
        [BASH, str(SBATCH), *flags],
        env=slurm_env(nodes, PIVOT_DRY_RUN="1", SLURM_JOB_NODELIST="gpu01"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    lines = [shlex.split(x[2:]) for x in res.stdout.splitlines() if x.startswith("+ ")]
    assert len(lines) == 2, res.stdout
    return lines[0], lines[1]


def check_case(
    flags: list[str], nodes: int, memory: int | None, capsys: pytest.CaptureFixture[str]
) -> None:
    """One documented command on `nodes` nodes: the preflight's verdict is the table's, and a
    command that passes starts torchrun with the job's shape and the same flags."""
    given = flags + (["--cluster.gpu-memory-gb", str(memory)] if memory else [])
    preflight, torchrun = render(given, nodes)
    assert preflight[:5] == ["srun", "--nodes", "1", "--ntasks", "1"]
    assert preflight[6] == str(ROOT / "pivot" / "main.py") and preflight[7] == "--dry-run"
    assert preflight[8:12] == ["--cluster.nnodes", str(nodes), "--cluster.devices-per-node", "8"]
    assert torchrun[torchrun.index("--nnodes") + 1] == str(nodes)
    assert torchrun[-len(given) :] == given
    capsys.readouterr()
    rc = main(preflight[7:])  # what srun runs on the first node
    out, err = capsys.readouterr()
    fewest = FEWEST[preset_of(flags), memory or 96]  # no GPU here: the preset's 96 GB H20
    if nodes >= fewest:
        assert rc == 0, err
        assert f"{nodes} hosts x 8 devices" in out
    else:
        assert rc == 2, out
        assert f"pivot: fits on {fewest} nodes of 8 devices of {memory or 96} GB" in err


def test_every_paper_preset_has_a_documented_command() -> None:
    documented = {preset_of(split(argv)[1]) for _, argv in COMMANDS}
    assert set(PAPER_WORLD) <= documented


@pytest.mark.parametrize(("where", "argv"), COMMANDS, ids=[w for w, _ in COMMANDS])
@pytest.mark.slow
def test_documented_command_as_written(
    where: str, argv: list[str], cluster: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes, flags = split(argv)
    assert nodes is not None, f"{where}: give sbatch --nodes (Slurm's default is one node)"
    check_case(on_cluster(flags, cluster), nodes, None, capsys)


@pytest.mark.parametrize("preset", list(PAPER_WORLD))
@pytest.mark.slow
def test_documented_command_on_2_4_8_nodes_of_80_and_96_gb(
    preset: str, cluster: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each preset's first documented command, on each allocation a user might have."""
    flags = next(split(a)[1] for _, a in COMMANDS if preset_of(split(a)[1]) == preset)
    for nodes in (2, 4, 8):
        for memory in (80, 96):
            check_case(on_cluster(flags, cluster), nodes, memory, capsys)


@pytest.mark.parametrize(("nodes", "starts"), [(1, False), (2, True)])
@pytest.mark.slow
def test_real_path_preflight_then_torchrun(
    nodes: int, starts: bool, cluster: Path, tmp_path: Path
) -> None:
    """srun runs the preflight for real (a python process on the 'first node'); only when it
    passes does srun start torchrun, and a failed preflight's exit code 2 is the job's."""
    where, argv = next((w, a) for w, a in COMMANDS if w.startswith("README"))
    flags = on_cluster(split(argv)[1], cluster)
    path = stand_ins(tmp_path / "bin", nodes)
    env = slurm_env(nodes, PATH=path, HOME=str(tmp_path / "home"), OMP_NUM_THREADS="1")
    res = subprocess.run(
        [BASH, str(SBATCH), *flags], env=env, capture_output=True, text=True, timeout=120
    )
    calls = [
        c.strip("\n").split("\n")
        for c in (tmp_path / "bin" / "srun.calls").read_text().split("\n\n")
        if c.strip()
    ]
    if starts:
        assert res.returncode == 0, res.stderr
        assert len(calls) == 2 and "--dry-run" in calls[0] and "--rdzv-backend" in calls[1]
        assert calls[1][calls[1].index("--nnodes") + 1] == str(nodes)
    else:
        assert res.returncode == 2, res.stdout + res.stderr
        assert len(calls) == 1 and "--dry-run" in calls[0]  # torchrun never started
        assert "pivot: fits on 2 nodes of 8 devices of 96 GB" in res.stderr
        assert "nothing was started" in res.stderr
