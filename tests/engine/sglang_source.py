"""Pinned libraries' own source, read from their wheel or sdist with `ast` (never imported): the
oracle of the contract tests. Fetched once with `pip download --no-deps` into .cache/wheels."""

from __future__ import annotations

import ast
import fcntl
import os
import subprocess
import sys
import zipfile
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WHEELS = ROOT / ".cache" / "wheels"
NETWORK_ERRORS = (
    "NewConnectionError",
    "Temporary failure in name resolution",
    "Network is unreachable",
    "ConnectionError",
    "Connection refused",
    "timed out",
    "ReadTimeoutError",
    "No route to host",
)


def fetch_wheel(name: str, version: str) -> Path:
    """The pinned wheel under .cache/wheels (downloaded if absent); skips only when the registry
    cannot be reached, fails on any other pip error."""
    return _download(
        name, version, f"{name.replace('-', '_')}-{version}-*.whl", ["--only-binary", ":all:"], 600
    )


def fetch_sdist(name: str, version: str) -> Path:
    """The pinned source archive under .cache/wheels (downloaded if absent). pip prepares its
    metadata with the venv's torch (`--no-build-isolation`) and no CUDA build."""
    return _download(
        name,
        version,
        f"{name.replace('-', '_')}-{version}.tar.gz",
        ["--no-binary", ":all:", "--no-build-isolation"],
        900,
        {**os.environ, "FLASH_ATTENTION_SKIP_CUDA_BUILD": "TRUE"},
    )


def _download(
    name: str,
    version: str,
    pattern: str,
    flags: list[str],
    timeout: int,
    env: dict[str, str] | None = None,
) -> Path:
    WHEELS.mkdir(parents=True, exist_ok=True)
    with open(WHEELS / ".lock", "w") as lock:  # one download per wheel across test processes
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _download_locked(name, version, pattern, flags, timeout, env)


def _download_locked(
    name: str,
    version: str,
    pattern: str,
    flags: list[str],
    timeout: int,
    env: dict[str, str] | None,
) -> Path:
    found = sorted(WHEELS.glob(pattern))
    if found:
        return found[0]
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            *flags,
            f"{name}=={version}",
            "-d",
            str(WHEELS),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    found = sorted(WHEELS.glob(pattern))
    if found:
        return found[0]
    out = res.stdout + res.stderr
    if any(e in out for e in NETWORK_ERRORS):
        pytest.skip(
            f"package registry unreachable, cannot fetch {name}=={version}: {out.strip().splitlines()[-1]}"
        )
    raise RuntimeError(
        f"pip download {name}=={version} {' '.join(flags)} failed (exit {res.returncode}): {out[-2000:]}"
    )


class Source:
    """The files of one wheel, parsed on demand."""

    def __init__(self, wheel: Path) -> None:
        self.zip = zipfile.ZipFile(wheel)
        self.names = set(self.zip.namelist())

    def text(self, path: str) -> str:
        return self.zip.read(path).decode()

    @cache  # noqa: B019 (one Source per wheel, alive for the whole test session)
    def tree(self, path: str) -> ast.Module:
        return ast.parse(self.text(path), filename=path)

    def cls(self, path: str, name: str) -> ast.ClassDef:
        for node in self.tree(path).body:
            if isinstance(node, ast.ClassDef) and node.name == name:
                return node
        raise AssertionError(f"{path}: no class {name}")

    def method(self, path: str, cls: str, name: str) -> ast.FunctionDef | ast.AsyncFunctionDef:
        for node in self.cls(path, cls).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
                return node
        raise AssertionError(f"{path}: {cls} has no method {name}")

    def find_method(
        self, classes: list[tuple[str, str]], name: str
    ) -> ast.FunctionDef | ast.AsyncFunctionDef:
        """`name` in the first of (path, class) that defines it (a class and its mixins, in MRO order)."""
        for path, cls in classes:
            try:
                return self.method(path, cls, name)
            except AssertionError:
                continue
        raise AssertionError(f"no method {name} in {', '.join(c for _, c in classes)}")

    def strings(self, path: str) -> set[str]:
        return {
            n.value
            for n in ast.walk(self.tree(path))
            if isinstance(n, ast.Constant) and isinstance(n.value, str)
        }


def params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[list[str], bool]:
    """A function's parameter names (self first) and whether it takes **kwargs."""
    a = fn.args
    return [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs], a.kwarg is not None


def returned_strings(fn: ast.AST) -> list[str]:
    """Every string (joined implicit concatenations) in `message=` keywords under `fn`."""
    out = []
    for node in ast.walk(fn):
        if isinstance(node, ast.keyword) and node.arg == "message":
            parts = [
                n.value
                for n in ast.walk(node.value)
                if isinstance(n, ast.Constant) and isinstance(n.value, str)
            ]
            if parts:
                out.append("".join(parts))
    return out
