"""`parse_tool_calls`: the calls in a turn's text, in the forms Qwen's (hermes) and GLM-4.5's
chat templates write them. Expected values are written by hand from those templates' forms."""

from __future__ import annotations

import pytest

from pivot.tools.calls import FORMATS, ToolCall, parse_tool_calls


def test_hermes_one_call_as_qwen_writes_it() -> None:
    block = '<tool_call>\n{"name": "calc", "arguments": {"expr": "47+85"}}\n</tool_call>'
    content, calls = parse_tool_calls(block)
    assert content == ""
    assert calls == [ToolCall("calc", {"expr": "47+85"}, block, "")]


def test_hermes_two_calls_in_order_with_text_around() -> None:
    text = (
        "Let me add first.\n"
        '<tool_call>{"name": "calc", "arguments": {"expr": "1+2"}}</tool_call>\n'
        "and then subtract\n"
        '<tool_call>  \n {"name":"calc","arguments":{"expr":"9-4"}}\t\n</tool_call>\n'
    )
    content, calls = parse_tool_calls(text, "hermes")
    assert content == "Let me add first.\n\nand then subtract"
    assert [(c.name, c.arguments, c.error) for c in calls] == [
        ("calc", {"expr": "1+2"}, ""),
        ("calc", {"expr": "9-4"}, ""),
    ]
    assert calls[1].raw.startswith("<tool_call>  \n") and calls[1].raw.endswith("</tool_call>")


def test_text_without_calls_is_returned_as_is() -> None:
    assert parse_tool_calls("  Answer: 132\n") == ("  Answer: 132\n", [])


def test_hermes_malformed_json_is_a_call_with_an_error() -> None:
    good = '<tool_call>{"name": "calc", "arguments": {"expr": "1+1"}}</tool_call>'
    bad = '<tool_call>{"name": "calc", "arguments": {"expr": "1+1"}</tool_call>'
    content, calls = parse_tool_calls(f"x {bad} y {good}")
    assert content == "x  y"
    assert len(calls) == 2
    assert calls[0].arguments is None and calls[0].raw == bad
    assert calls[0].error.startswith("tool call is not valid JSON")
    assert "\n" not in calls[0].error
    assert calls[1] == ToolCall("calc", {"expr": "1+1"}, good, "")


@pytest.mark.parametrize(
    "body, why",
    [
        ('{"arguments": {"expr": "1+1"}}', 'tool call has no "name"'),
        ('{"name": "", "arguments": {}}', 'tool call has no "name"'),
        ('["calc", {"expr": "1+1"}]', "tool call is not a JSON object with a name"),
        ('{"name": "calc", "arguments": [1, 2]}', "arguments of calc are not a JSON object"),
        ('{"name": "calc", "arguments": "{oops"}', "arguments of calc are not valid JSON"),
    ],
)
def test_hermes_unreadable_blocks(body: str, why: str) -> None:
    _, [call] = parse_tool_calls(f"<tool_call>{body}</tool_call>")
    assert call.error == why
    assert call.arguments is None


def test_hermes_argument_forms_models_write() -> None:
    _, calls = parse_tool_calls(
        '<tool_call>{"name": "a", "arguments": "{\\"x\\": 1}"}</tool_call>'  # JSON text
        '<tool_call>{"name": "b", "parameters": {"y": 2}}</tool_call>'  # "parameters"
        '<tool_call>{"name": "c"}</tool_call>'  # a function without parameters
    )
    assert [(c.name, c.arguments, c.error) for c in calls] == [
        ("a", {"x": 1}, ""),
        ("b", {"y": 2}, ""),
        ("c", {}, ""),
    ]


def test_unclosed_block_is_a_call_with_an_error() -> None:
    content, [call] = parse_tool_calls('So: <tool_call>{"name": "calc", "argu')
    assert content == "So:"
    assert call.error == "<tool_call> block is never closed"
    assert call.raw == '<tool_call>{"name": "calc", "argu'


def test_glm4_form() -> None:
    # GLM-4.5's template: the name, then per argument a key and its value (a string as it is,
    # anything else as JSON)
    block = (
        "<tool_call>get_weather\n"
        "<arg_key>city</arg_key>\n<arg_value>Beijing</arg_value>\n"
        "<arg_key>days</arg_key>\n<arg_value>3</arg_value>\n"
        '<arg_key>opts</arg_key>\n<arg_value>{"unit": "C"}</arg_value>\n'
        "</tool_call>"
    )
    content, calls = parse_tool_calls("I will look it up.\n" + block, "glm4")
    assert content == "I will look it up."
    assert calls == [
        ToolCall("get_weather", {"city": "Beijing", "days": 3, "opts": {"unit": "C"}}, block, "")
    ]


def test_glm4_two_calls_no_arguments_and_glm47_spacing() -> None:
    text = (
        "<tool_call>now</tool_call>"
        "<tool_call>calc<arg_key>expr</arg_key><arg_value>47+85</arg_value></tool_call>"
    )
    _, calls = parse_tool_calls(text, "glm4")
    assert [(c.name, c.arguments, c.error) for c in calls] == [
        ("now", {}, ""),
        ("calc", {"expr": "47+85"}, ""),
    ]


def test_glm4_without_a_name_is_an_error() -> None:
    _, [call] = parse_tool_calls(
        "<tool_call>\n<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>", "glm4"
    )
    assert call.error == "tool call has no function name"
    assert call.arguments is None


def test_unknown_format_lists_the_formats() -> None:
    with pytest.raises(ValueError, match="'mistral' is not one of hermes, glm4"):
        parse_tool_calls("<tool_call>{}</tool_call>", "mistral")
    assert FORMATS == ("hermes", "glm4")
