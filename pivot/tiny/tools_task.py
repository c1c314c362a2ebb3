"""The multi-turn variant of the tiny arithmetic task (`--preset tiny-tools`): the policy may call a
calculator (`pivot.tools.calculator`, configs/tools/calculator.yaml) instead of working the
columns, and answers from its response.

An episode that uses the tool has two turns:

    Problem: 47+85=?\\n                                          the prompt (as in the base task)
    <tool_call>{"name": "calc", "arguments": {"expr": "47+85"}}</tool_call><|endoftext|>   turn 1
    <tool_response>132</tool_response>\\n                        the tool's response (mask 0)
    Answer: 132<|endoftext|>                                    turn 2

and one that does not is the base task's worked solution in one turn. The tiny tools policy
(`pivot.tiny.tools_build`) is the shipped tiny policy taught this call format by a short
supervised warm-up in which a minority of problems use the tool, so it starts calling it on a
minority of samples and RL has a choice to learn: calls get the answer right, its own column
work mostly does not.

`CHAT_TEMPLATE` is the tools policy's chat template (in its tokenizer_config.json): the base
task's raw prompt, each assistant turn closed by EOS, each tool response in hermes' tags. The
runtime renders tool responses with it (`pivot.tools.render`), as it does a Qwen template.

Pure Python (no torch).
"""

from __future__ import annotations

import json

from pivot.tiny import synthetic as syn

TOOL_NAME = "calc"

CHAT_TEMPLATE = (
    "{%- for m in messages -%}"
    "{%- if m.role == 'assistant' -%}"
    "{{ m.content }}"
    "{%- for c in m.tool_calls or [] -%}"
    '<tool_call>{"name": {{ c.function.name | tojson }}, "arguments": {{ c.function.arguments | tojson }}}</tool_call>'
    "{%- endfor -%}"
    "{{ eos_token }}"
    "{%- elif m.role == 'tool' -%}"
    "<tool_response>{{ m.content }}</tool_response>{{ '\\n' }}"
    "{%- else -%}"
    "{{ m.content }}"
    "{%- endif -%}"
    "{%- endfor -%}"
)


def expression(problem: syn.Problem) -> str:
    return f"{problem.a}{problem.op}{problem.b}"


def tool_call_text(problem: syn.Problem) -> str:
    """Turn 1 of a tool-using episode (without its EOS)."""
    return call_text(expression(problem))


def call_text(expr: str) -> str:
    """A call of the calculator on `expr`, as the tiny tools policy writes it."""
    args = json.dumps({"name": TOOL_NAME, "arguments": {"expr": expr}})
    return f"<tool_call>{args}</tool_call>"


def tool_reply_text(result: str) -> str:
    """What the template renders after turn 1's EOS for the calculator's response."""
    return f"<tool_response>{result}</tool_response>\n"


def answer_text(result: str) -> str:
    """Turn 2 (without its EOS): the answer read off the tool's response."""
    return f"{syn.ANSWER_PREFIX}{result}"
