"""A veRL user's tool runs unchanged: veRL 0.6.1's own `verl/tools/gsm8k_tool.py` (a byte-for-byte
copy in fixtures/verl_tools/) loaded from veRL's own example config
(examples/sglang_multiturn/config/tool_config/gsm8k_tool_config.yaml, verbatim in fixtures/) as
`verl.tools.gsm8k_tool`, then created, executed, rewarded and released through `ToolRunner`.

Expected values from the tool's code and veRL's gsm8k scorer: it scores "#### <answer>" with
the flexible method; a step reward of 0.0 when the reward improved on the last answer's, -0.05
otherwise; calc_reward is 1.0 for the ground truth."""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from pivot.tools.calls import parse_tool_calls
from pivot.tools.registry import load_tools, tool_schemas
from pivot.tools.runner import ToolResults, ToolRunner
from pivot.tools.verl_compat import ensure_verl_importable

FIXTURES = Path(__file__).resolve().parent / "fixtures"
CONFIG = FIXTURES / "gsm8k_tool_config.yaml"
KWARGS = {"calc_gsm8k_reward": {"create_kwargs": {"ground_truth": "72"}}}


@pytest.fixture
def gsm8k_tools() -> Iterator[dict]:
    """The config's tools, the fixture folder importable as part of `verl.tools`."""
    ensure_verl_importable()
    package = importlib.import_module("verl.tools")
    folder = str(FIXTURES / "verl_tools")
    package.__path__.append(folder)
    try:
        yield load_tools(CONFIG)
    finally:
        package.__path__.remove(folder)
        sys.modules.pop("verl.tools.gsm8k_tool", None)


def wait_for(runner: ToolRunner, n: int) -> list[ToolResults]:
    out: list[ToolResults] = []
    deadline = time.monotonic() + 5.0
    while len(out) < n:
        assert time.monotonic() < deadline
        out += runner.poll()
        time.sleep(0.002)
    return out


def episode(tools: dict, turns: list[str]) -> list[ToolResults]:
    with ToolRunner(tools, timeout_s=5.0, max_in_flight=4, max_response_chars=500) as runner:
        for text in turns:
            _, calls = parse_tool_calls(text)
            runner.run_calls("ep", calls, KWARGS)
            wait_for(runner, 0)
        runner.finish("ep")
        return wait_for(runner, len(turns) + 1)


def answer(value: str) -> str:
    return f'<tool_call>\n{{"name": "calc_gsm8k_reward", "arguments": {{"answer": "{value}"}}}}\n</tool_call>'


def test_config_loads_veRLs_gsm8k_tool(gsm8k_tools: dict) -> None:
    [(name, tool)] = gsm8k_tools.items()
    assert name == "calc_gsm8k_reward"
    assert type(tool).__module__ == "verl.tools.gsm8k_tool"
    assert tool.config == {"type": "native"}
    assert tool_schemas(gsm8k_tools) == [
        yaml.safe_load(CONFIG.read_text())["tools"][0]["tool_schema"]
    ]


def test_right_answer(gsm8k_tools: dict) -> None:
    calls, end = episode(gsm8k_tools, [answer("72")])
    assert calls.responses == ["Current parsed answer='72' reward=1.0"]
    assert (calls.step_rewards, calls.errors) == ([0.0], 0)
    assert (end.kind, end.final_reward, end.errors) == ("finish", 1.0, 0)


def test_wrong_answer(gsm8k_tools: dict) -> None:
    calls, end = episode(gsm8k_tools, [answer("71")])
    assert calls.responses == ["Current parsed answer='71' reward=0.0"]
    assert calls.step_rewards == [-0.05]  # no improvement on the instance's reward
    assert end.final_reward == 0.0


def test_state_lives_across_turns(gsm8k_tools: dict) -> None:
    # one instance for the episode: the second answer improves on the first, the third does not
    first, second, third, end = episode(gsm8k_tools, [answer("71"), answer("72"), answer("72")])
    assert [r.step_rewards for r in (first, second, third)] == [[-0.05], [0.0], [-0.05]]
    assert end.final_reward == 1.0
    assert gsm8k_tools["calc_gsm8k_reward"]._instance_dict == {}  # released
