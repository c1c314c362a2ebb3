"""The tiny task's calculator (`pivot.tools.calculator`) through its config and the runner, in
the form the tiny tools policy writes its call (pivot/tiny/tools_task.py)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from pivot.tools.calculator import CalculatorTool, evaluate_expression
from pivot.tools.calls import parse_tool_calls
from pivot.tools.registry import load_tools, tool_schemas
from pivot.tools.runner import ToolResults, ToolRunner

CONFIG = Path(__file__).resolve().parents[2] / "configs" / "tools" / "calculator.yaml"


@pytest.mark.parametrize(
    "expr, expected",
    [("47+85", "132"), ("903-18", "885"), (" 7 + 8 ", "15"), ("18-903", "-885"), ("0+0", "0")],
)
def test_evaluate_expression(expr: str, expected: str) -> None:
    assert evaluate_expression(expr) == expected


@pytest.mark.parametrize("expr", ["4*5", "1+2+3", "-1+2", "abc", "", "1.5+2", "9" * 31 + "+1"])
def test_malformed_expression_is_an_error_line(expr: str) -> None:
    text = evaluate_expression(expr)
    assert text.startswith("Error: ") and "\n" not in text


def test_config_schema_is_the_built_in_one() -> None:
    from pivot.tools.calculator import SCHEMA

    tools = load_tools(CONFIG)
    assert isinstance(tools["calc"], CalculatorTool)
    assert (
        tool_schemas(tools)
        == [SCHEMA]
        == [yaml.safe_load(CONFIG.read_text())["tools"][0]["tool_schema"]]
    )


def test_calculator_through_the_runner() -> None:
    tools = load_tools(CONFIG)
    turn = (
        '<tool_call>{"name": "calc", "arguments": {"expr": "47+85"}}</tool_call>'
        '<tool_call>{"name": "calc", "arguments": {"expr": "903-18"}}</tool_call>'
        '<tool_call>{"name": "calc", "arguments": {"expr": "4*5"}}</tool_call>'
        '<tool_call>{"name": "calc", "arguments": {"x": 1}}</tool_call>'
    )
    content, calls = parse_tool_calls(turn)
    assert content == ""
    out: list[ToolResults] = []
    with ToolRunner(tools, timeout_s=5.0, max_in_flight=4, max_response_chars=100) as runner:
        runner.run_calls(("step", 0), calls, {})
        runner.finish(("step", 0))
        deadline = time.monotonic() + 5.0
        while len(out) < 2:
            assert time.monotonic() < deadline
            out += runner.poll()
            time.sleep(0.002)
    result, end = out
    assert result.responses[:2] == ["132", "885"]
    assert result.responses[2].startswith("Error: expected two non-negative integers")
    assert result.responses[3] == 'Error: calc needs "expr", a string such as "47+85"'
    assert result.step_rewards == [0.0] * 4
    # the tool answered every call (its error lines are its answers, not failures)
    assert result.errors == 0
    assert (end.kind, end.final_reward, end.errors) == ("finish", 0.0, 0)
    assert tools["calc"]._instances == set()  # released
