"""The tool calls in one turn of the policy's text, in the form its chat template writes them.

Formats (`parse_tool_calls(text, fmt)`):

- "hermes" (Qwen2.5, Qwen3 and the other templates of the Hermes convention): each call is a
  JSON object in its own block,
  `<tool_call>\\n{"name": "calc", "arguments": {"expr": "47+85"}}\\n</tool_call>`; whitespace
  around the JSON is free. As veRL's `HermesToolParser` (verl/experimental/agent_loop/
  tool_parser.py, 0.6.1 and 0.9.1) and vLLM's hermes parser read it.
- "glm4" (GLM-4.5, GLM-4.6, GLM-4.7): the name, then one key/value pair per argument,
  `<tool_call>calc\\n<arg_key>expr</arg_key>\\n<arg_value>47+85</arg_value>\\n</tool_call>`.
  GLM's chat template writes a string value as it is and any other value as JSON, so a value is
  read as JSON when it parses and kept as the string otherwise. Checked against veRL 0.9.1's
  `GLMToolParser` (same file; the name is the text before the first `<arg_key>`, which also
  reads GLM-4.7's form with no newline after the name) and vLLM's
  `vllm/entrypoints/openai/tool_parsers/glm4_moe_tool_parser.py` (pairs separated by any
  whitespace). Unlike vLLM, no tool schema is consulted: a string argument that looks like JSON
  ("72") arrives as that JSON value (72); veRL's parser does the same.

Unlike veRL's parsers, which log and drop a block they cannot read, every block becomes a
`ToolCall`: a bad one carries `error`, so the runner can answer the model with one error line
and the model sees why its call did nothing. A `<tool_call>` the turn never closes (the turn
was cut off) is such a bad block.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

OPEN = "<tool_call>"
CLOSE = "</tool_call>"
FORMATS = ("hermes", "glm4")
"""What `parse_tool_calls` reads."""

# a closed block, or an unclosed one running to the end of the text
_BLOCK = re.compile(re.escape(OPEN) + r"(.*?)(" + re.escape(CLOSE) + r"|\Z)", re.DOTALL)
_GLM_PAIR = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)


@dataclass(frozen=True)
class ToolCall:
    """One tool call as the model wrote it."""

    name: str
    """The function's name ("" when the block names none)."""
    arguments: dict[str, Any] | None
    """The decoded arguments; None when the block could not be read."""
    raw: str
    """The block exactly as generated, tags included."""
    error: str = ""
    """Why the block could not be read, in one line; "" when it parsed."""


def _hermes(body: str, raw: str) -> ToolCall:
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as e:
        return ToolCall("", None, raw, f"tool call is not valid JSON: {e.msg} at char {e.pos}")
    if not isinstance(obj, dict):
        return ToolCall("", None, raw, "tool call is not a JSON object with a name")
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return ToolCall("", None, raw, 'tool call has no "name"')
    name = name.strip()
    # "arguments" is the template's key; some models write "parameters"; a function without
    # parameters may get neither
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # arguments given as a JSON text, as OpenAI's API carries them
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return ToolCall(name, None, raw, f"arguments of {name} are not valid JSON")
    if args is None:
        args = {}
    if not isinstance(args, dict):
        return ToolCall(name, None, raw, f"arguments of {name} are not a JSON object")
    return ToolCall(name, args, raw)


def _glm_value(text: str) -> Any:
    value = text.strip()
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return value


def _glm4(body: str, raw: str) -> ToolCall:
    first = body.find("<arg_key>")
    name = (body if first < 0 else body[:first]).strip()
    if not name:
        return ToolCall("", None, raw, "tool call has no function name")
    if "\n" in name or "<" in name:
        return ToolCall("", None, raw, f"tool call has no readable function name: {name[:40]!r}")
    pairs = _GLM_PAIR.findall(body[first:]) if first >= 0 else []
    return ToolCall(name, {k.strip(): _glm_value(v) for k, v in pairs}, raw)


_PARSERS = {"hermes": _hermes, "glm4": _glm4}


def parse_tool_calls(text: str, fmt: str = "hermes") -> tuple[str, list[ToolCall]]:
    """The turn's text without its tool-call blocks (stripped at both ends), and its calls in
    the order written. A text without `<tool_call>` is returned as it is, with no calls."""
    parse = _PARSERS.get(fmt)
    if parse is None:
        raise ValueError(f"tool call format {fmt!r} is not one of {', '.join(FORMATS)}")
    if OPEN not in text:
        return text, []
    calls: list[ToolCall] = []
    for m in _BLOCK.finditer(text):
        if not m.group(2):
            calls.append(ToolCall("", None, m.group(0), f"{OPEN} block is never closed"))
        else:
            calls.append(parse(m.group(1), m.group(0)))
    return _BLOCK.sub("", text).strip(), calls
