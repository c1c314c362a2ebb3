"""requirements-gpu.txt against sglang 0.5.23's own pins (its wheel's METADATA, from .cache/wheels):
the cheap part of `tools/resolve_gpu_requirements.py`, which runs pip's whole resolver (minutes)."""

from __future__ import annotations

import zipfile

from packaging.requirements import Requirement

from tests.conftest import ROOT
from tests.engine.sglang_source import fetch_wheel

REQS = ROOT / "requirements-gpu.txt"


def pins() -> dict[str, str]:
    out = {}
    for line in REQS.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            req = Requirement(line)
            assert len(req.specifier) == 1 and next(iter(req.specifier)).operator == "==", (
                f"{line}: pin one version"
            )
            out[req.name.lower()] = next(iter(req.specifier)).version
    return out


def sglang_requires() -> list[Requirement]:
    with zipfile.ZipFile(fetch_wheel("sglang", "0.5.23")) as z:
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    return [
        Requirement(line.split(":", 1)[1].strip())
        for line in meta.splitlines()
        if line.startswith("Requires-Dist:")
    ]


def test_every_pin_satisfies_sglang() -> None:
    mine = pins()
    assert mine["sglang"] == "0.5.23"
    checked = []
    env = {
        "python_version": "3.11",
        "sys_platform": "linux",
        "platform_machine": "x86_64",
        "platform_system": "Linux",
        "extra": "",
    }
    for req in sglang_requires():
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        name = req.name.lower()
        if name in mine:
            assert req.specifier.contains(mine[name], prereleases=True), (
                f"{name}=={mine[name]} but sglang needs {req}"
            )
            checked.append(name)
    assert {"torch", "tokenizers", "numpy", "pyzmq"} <= set(checked), checked


def test_numpy_is_below_2_4_for_mistral_common() -> None:
    """sglang needs mistral_common>=1.11.5, whose every release up to 1.13.1 says numpy<2.4 on
    CPython <= 3.12 (read from their wheels' METADATA; the resolver run proves the set)."""
    assert tuple(int(x) for x in pins()["numpy"].split(".")[:2]) < (2, 4)


def test_kernels_without_wheels_are_not_in_the_file() -> None:
    """flash-attn 2.8.3 and transformer-engine 2.9 have no wheel for torch 2.14 / CUDA 13: pip would
    build them in an isolated env without torch and fail; docs/gpu.md gives the source build."""
    mine = pins()
    assert not {"flash-attn", "transformer-engine", "transformer-engine-torch"} & set(mine)
    doc = (ROOT / "docs" / "gpu.md").read_text()
    assert (
        "pip install --no-build-isolation" in doc
        and "flash-attn==2.8.3" in doc
        and "transformer_engine" in doc
    )
