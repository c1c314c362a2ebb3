"""The tiny task's tool: a calculator for "a+b" and "a-b" over non-negative integers.

Written as a veRL tool file is (veRL's constructor and four coroutine methods, configured by
`configs/tools/calculator.yaml` in veRL's tool-config layout), but importing nothing from veRL:
Pivot's runner duck-types tools, so it needs no base class. `execute` answers with the text
itself (Pivot's runner takes a str where veRL's tools give `ToolResponse(text=...)`); its step
reward is always 0 and `calc_reward` is 0.0: the task's reward is the verifier's, the tool only
spares the policy the arithmetic.
"""

from __future__ import annotations

import re
from typing import Any
from uuid import uuid4

NAME = "calc"
SCHEMA: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": NAME,
        "description": "Add or subtract two non-negative integers, e.g. 47+85 or 903-18.",
        "parameters": {
            "type": "object",
            "properties": {
                "expr": {
                    "type": "string",
                    "description": "One sum or difference of two non-negative integers: 47+85",
                }
            },
            "required": ["expr"],
        },
    },
}
"""The schema used when the config gives none (the same as configs/tools/calculator.yaml's)."""
MAX_DIGITS = 30
"""Longer operands are refused: the task's numbers are small, and a runaway number is noise."""
_EXPR = re.compile(r"\s*(\d+)\s*([+-])\s*(\d+)\s*")


def _value(expr: str) -> int:
    m = _EXPR.fullmatch(expr)
    if m is None:
        raise ValueError(f"expected two non-negative integers joined by + or -, got {expr!r}")
    a, op, b = m.groups()
    if max(len(a), len(b)) > MAX_DIGITS:
        raise ValueError(f"operands longer than {MAX_DIGITS} digits")
    return int(a) + int(b) if op == "+" else int(a) - int(b)


def evaluate_expression(expr: str) -> str:
    """What the tool answers for `expr`: the value of "a+b" or "a-b" ("132" for "47+85"), or
    one line "Error: ..." saying what is wrong with it."""
    try:
        return str(_value(expr))
    except ValueError as e:
        return f"Error: {e}"


class CalculatorTool:
    """One function tool, `calc(expr)`."""

    def __init__(self, config: dict, tool_schema: Any = None) -> None:
        self.config = config
        # veRL's registry passes the config's tool_schema (an OpenAIFunctionToolSchema), or
        # None when the entry has none: then the built-in schema stands
        self.tool_schema: Any = tool_schema if tool_schema is not None else SCHEMA
        self.name: str = tool_schema.function.name if tool_schema is not None else NAME
        self._instances: set[str] = set()

    def get_openai_tool_schema(self) -> Any:
        return self.tool_schema

    async def create(self, instance_id: str | None = None, **kwargs: Any) -> tuple[str, str]:
        instance_id = instance_id if instance_id is not None else str(uuid4())
        self._instances.add(instance_id)
        return instance_id, ""

    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[str, float, dict]:
        expr = parameters.get("expr")
        if not isinstance(expr, str):
            return 'Error: calc needs "expr", a string such as "47+85"', 0.0, {}
        return evaluate_expression(expr), 0.0, {}

    async def calc_reward(self, instance_id: str, **kwargs: Any) -> float:
        return 0.0

    async def release(self, instance_id: str, **kwargs: Any) -> None:
        self._instances.discard(instance_id)
