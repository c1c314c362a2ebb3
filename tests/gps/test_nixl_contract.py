"""Pivot's NIXL link (pivot/gps/nixl_link.py) against NIXL 1.5.1's Python API as the installed
`nixl_cu12` wheel ships it (its `_api.py`, read with `ast`, not imported): every `nixl_agent`
method Pivot calls exists and takes its arguments. nixl-cu13 1.5.1 (the GPU hosts' wheel) is the
same release of the same source."""

from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.engine.sglang_source import params


@pytest.fixture(scope="module")
def api() -> ast.Module:
    spec = importlib.util.find_spec("nixl_cu12")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("nixl-cu12 is not installed (requirements.txt pins nixl-cu12==1.5.1)")
    assert importlib.metadata.version("nixl-cu12") == "1.5.1"
    return ast.parse((Path(next(iter(spec.submodule_search_locations))) / "_api.py").read_text())


def _methods(tree: ast.Module, cls: str) -> dict[str, ast.FunctionDef]:
    node = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls)
    return {n.name: n for n in node.body if isinstance(n, ast.FunctionDef)}


def test_every_agent_call_exists_with_its_arguments(api: ast.Module) -> None:
    agent = _methods(api, "nixl_agent")
    calls = [
        n
        for n in ast.walk(ast.parse((ROOT / "pivot/gps/nixl_link.py").read_text()))
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and ast.unparse(n.func.value) == "self.agent"
    ]
    used = {c.func.attr for c in calls}
    assert {
        "register_memory",
        "get_xfer_descs",
        "initialize_xfer",
        "transfer",
        "check_xfer_state",
    } <= used, used
    for call in calls:
        fn = agent.get(call.func.attr)
        assert fn is not None, f"nixl_agent has no {call.func.attr}"
        names, var_kw = params(fn)
        assert len(call.args) <= len(fn.args.args) - 1, ast.unparse(call)
        assert var_kw or {k.arg for k in call.keywords} <= set(names), ast.unparse(call)


def test_agent_and_config_constructors(api: ast.Module) -> None:
    init, _ = params(_methods(api, "nixl_agent")["__init__"])
    assert init[:3] == ["self", "agent_name", "nixl_conf"], init
    conf, _ = params(_methods(api, "nixl_agent_config")["__init__"])
    assert "backends" in conf, conf
