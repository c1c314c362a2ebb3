"""Pivot's flash-attn call sites against flash-attn 2.8.3's own source (its sdist, read with
`ast`, never imported or built): the functions exist, take Pivot's positional arguments in that
order and its keywords, and the kernel's own checks are the rules Pivot's config enforces
(fp16/bf16 only, paged KV blocks a multiple of 256)."""

from __future__ import annotations

import ast
import tarfile
from pathlib import Path

import pytest

from pivot.engine.config import FLASH_BLOCK_MULTIPLE
from tests.conftest import ROOT
from tests.engine.sglang_source import fetch_sdist, params

PREFIX = "flash_attn-2.8.3/"


@pytest.fixture(scope="module")
def fa() -> tarfile.TarFile:
    return tarfile.open(fetch_sdist("flash-attn", "2.8.3"))


def _read(tar: tarfile.TarFile, path: str) -> str:
    f = tar.extractfile(PREFIX + path)
    assert f is not None, path
    return f.read().decode()


def _calls(path: Path, func: str) -> list[ast.Call]:
    return [
        n
        for n in ast.walk(ast.parse(path.read_text()))
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Name)
        and n.func.id in (func, f"_{func}")
    ]  # imported as itself or _<func>


@pytest.mark.parametrize(
    ("pivot_file", "func", "positional"),
    [
        (
            "pivot/engine/attention.py",
            "flash_attn_varlen_func",
            ["q", "k", "v", "cu_seqlens_q", "cu_seqlens_k", "max_seqlen_q", "max_seqlen_k"],
        ),
        ("pivot/model/transformer.py", "flash_attn_func", ["q", "k", "v"]),
    ],
)
def test_pivot_calls_match_the_signature(
    fa: tarfile.TarFile, pivot_file: str, func: str, positional: list[str]
) -> None:
    tree = ast.parse(_read(fa, "flash_attn/flash_attn_interface.py"))
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == func)
    names, _ = params(fn)
    assert names[: len(positional)] == positional, names
    calls = _calls(ROOT / pivot_file, func)
    assert calls, f"{pivot_file} no longer calls {func}"
    for call in calls:
        assert len(call.args) == len(positional), ast.unparse(call)
        assert {k.arg for k in call.keywords} <= set(names), ast.unparse(call)
    exported = _read(fa, "flash_attn/__init__.py")
    assert func in exported  # `from flash_attn import <func>` is what Pivot does


def test_the_kernel_checks_are_the_config_rules(fa: tarfile.TarFile) -> None:
    api = _read(fa, "csrc/flash_attn/flash_api.cpp")
    assert (
        "FlashAttention only support fp16 and bf16 data type" in api
    )  # --model.attention flash needs half
    assert f"page_block_size % {FLASH_BLOCK_MULTIPLE} == 0" in api  # engine.block_size for flash
    assert "varlen_fwd" in api and "block_table" in _read(fa, "flash_attn/flash_attn_interface.py")
