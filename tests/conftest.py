"""Shared test setup: the repo root on sys.path and the GPU marker's skip."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


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
