"""Pivot's stand-in for veRL's tool modules (`pivot/tools/verl_shim`) and the switch that puts it
in place (`ensure_verl_importable`). Expected values are hand-computed from veRL's documented
contract (gsm8k: the number after "#### ", or the last number; schemas: OpenAI's layout)."""

from __future__ import annotations

import asyncio
import importlib
import inspect
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from pivot.tools.verl_compat import SHIM_DIR, ensure_verl_importable

GSM8K_SCHEMA = {
    "type": "function",
    "function": {
        "name": "calc_gsm8k_reward",
        "description": "A tool for calculating the reward of gsm8k.",
        "parameters": {
            "type": "object",
            "properties": {"answer": {"type": "string", "description": "The answer"}},
            "required": ["answer"],
        },
    },
}


def _verl_modules() -> dict[str, ModuleType]:
    return {n: m for n, m in sys.modules.items() if n == "verl" or n.startswith("verl.")}


@pytest.fixture
def fresh_verl(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No `verl` imported and no shim on sys.path before the test; both as before after it."""
    saved = _verl_modules()
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p != str(SHIM_DIR)])
    for name in saved:
        del sys.modules[name]
    yield
    for name in _verl_modules():
        del sys.modules[name]
    sys.modules.update(saved)


def test_shim_stands_in_when_verl_does_not_import(fresh_verl: None) -> None:
    assert ensure_verl_importable() == "pivot shim"
    assert ensure_verl_importable() == "pivot shim"  # idempotent
    assert sys.path[0] == str(SHIM_DIR) and sys.path.count(str(SHIM_DIR)) == 1
    base_tool = importlib.import_module("verl.tools.base_tool")
    assert Path(base_tool.__file__ or "").is_relative_to(SHIM_DIR)
    for name in ("verl.tools.schemas", "verl.utils.rollout_trace", "verl.utils.reward_score.gsm8k"):
        importlib.import_module(name)


def test_half_imported_verl_is_forgotten(
    fresh_verl: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # an installed veRL whose __init__ fails on a missing dependency, as 0.6.1 does without ray
    pkg = tmp_path / "verl"
    pkg.mkdir()
    (pkg / "version.py").write_text("V = 1\n")
    (pkg / "__init__.py").write_text("from verl import version\nimport ray_is_not_installed\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert ensure_verl_importable() == "pivot shim"
    assert "verl.version" not in sys.modules
    assert Path(sys.modules["verl"].__file__ or "").is_relative_to(SHIM_DIR)


def test_real_verl_is_preferred_when_it_imports(
    fresh_verl: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "verl" / "tools").mkdir(parents=True)
    (tmp_path / "verl" / "__init__.py").write_text("")
    (tmp_path / "verl" / "tools" / "__init__.py").write_text("")
    (tmp_path / "verl" / "tools" / "base_tool.py").write_text("class BaseTool: ...\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert ensure_verl_importable() == "verl"
    assert str(SHIM_DIR) not in sys.path


@pytest.mark.parametrize(
    "solution, truth, method, expected",
    [
        ("so the answer is\n#### 72", "72", "strict", 1.0),
        ("#### 1,000", "1000", "strict", 1.0),  # strict drops the thousands comma
        ("#### 5 then #### 72", "72", "strict", 1.0),  # the last one
        ("the answer is 72", "72", "strict", 0.0),  # no "#### ": no answer
        ("#### 71", "72", "strict", 0.5),  # an answer, wrong: format_score
        ("I think 70, no: 72", "72", "flexible", 1.0),  # the last number
        ("#### 1,000", "1000", "flexible", 0.5),  # flexible keeps it as written
        ("no number here", "72", "flexible", 0.0),
        ("72" + " words" * 100, "72", "flexible", 0.0),  # beyond the last 300 characters
    ],
)
def test_gsm8k_compute_score(solution: str, truth: str, method: str, expected: float) -> None:
    ensure_verl_importable()
    gsm8k = importlib.import_module("verl.utils.reward_score.gsm8k")
    assert gsm8k.compute_score(solution, truth, method=method, format_score=0.5) == expected


def test_schemas_round_trip_as_a_template_takes_them() -> None:
    ensure_verl_importable()
    schemas = importlib.import_module("verl.tools.schemas")
    schema = schemas.OpenAIFunctionToolSchema.model_validate(GSM8K_SCHEMA)
    assert schema.function.name == "calc_gsm8k_reward"
    assert schema.function.strict is False
    assert schema.model_dump(exclude_unset=True, exclude_none=True) == GSM8K_SCHEMA
    bare = schemas.OpenAIFunctionSchema(name="now", description="the time")
    assert bare.parameters.model_dump() == {"type": "object", "properties": {}, "required": []}


def test_schema_records() -> None:
    ensure_verl_importable()
    s = importlib.import_module("verl.tools.schemas")
    parsed = s.OpenAIFunctionParsedSchema(name="calc", arguments='{"expr": "1+2"}')
    call, failed = s.OpenAIFunctionCallSchema.from_openai_function_parsed_schema(parsed)
    assert (call.name, call.arguments, failed) == ("calc", {"expr": "1+2"}, False)
    for text in ("{oops", "[1, 2]"):
        bad = s.OpenAIFunctionParsedSchema(name="calc", arguments=text)
        call, failed = s.OpenAIFunctionCallSchema.from_openai_function_parsed_schema(bad)
        assert (call.arguments, failed) == ({}, True)
    tool_call = s.OpenAIFunctionToolCall(id="c1", function=call)
    assert tool_call.type == "function"
    assert s.ToolResponse().is_empty()
    assert s.ToolResponse(text="hi").is_text_only()
    assert not s.ToolResponse(text="hi", image=["img"]).is_text_only()
    with pytest.raises(ValueError, match="image must be a list"):
        s.ToolResponse(image="img")


def test_base_tool_contract() -> None:
    ensure_verl_importable()
    BaseTool = importlib.import_module("verl.tools.base_tool").BaseTool
    schemas = importlib.import_module("verl.tools.schemas")
    schema = schemas.OpenAIFunctionToolSchema.model_validate(GSM8K_SCHEMA)
    tool = BaseTool({"type": "native"}, schema)
    assert (tool.name, tool.config, tool.get_openai_tool_schema()) == (
        "calc_gsm8k_reward",
        {"type": "native"},
        schema,
    )
    for method in ("create", "execute", "calc_reward", "release"):
        assert inspect.iscoroutinefunction(getattr(tool, method))

    async def lifecycle() -> tuple[object, ...]:
        iid, first = await tool.create()
        same, _ = await tool.create("mine")
        response, step, metrics = await tool.execute(iid, {"answer": "1"})
        return iid, first.is_empty(), same, step, metrics, await tool.calc_reward(iid)

    iid, empty, same, step, metrics, reward = asyncio.run(lifecycle())
    assert isinstance(iid, str) and len(iid) == 36 and empty and same == "mine"
    assert (step, metrics, reward) == (0.0, {}, 0.0)
    with pytest.raises(ValueError, match="no tool schema"):
        BaseTool({}, None)


def test_rollout_trace_op_passes_async_methods_through() -> None:
    ensure_verl_importable()
    rollout_trace_op = importlib.import_module("verl.utils.rollout_trace").rollout_trace_op

    class T:
        @rollout_trace_op
        async def execute(self, x: int) -> int:
            return x + 1

    assert inspect.iscoroutinefunction(T.execute)
    assert asyncio.run(T().execute(1)) == 2
