"""Chat templates (Jinja) rendered the way Hugging Face tokenizers render them.

The environment matches transformers' `apply_chat_template`: a sandbox that cannot mutate
its inputs, `trim_blocks` and `lstrip_blocks`, the loop-control extension, a `tojson` that
keeps non-ASCII text and does not HTML-escape, `raise_exception`, `strftime_now`, and a
`{% generation %}` block that renders its body. The template sees `messages`, `tools`,
`documents`, `add_generation_prompt`, the tokenizer's named special tokens and any extra
switches the caller passes (e.g. Qwen3's `enable_thinking`). Hub templates are untrusted
code, hence the sandbox and a namespace that refuses underscore-prefixed names.
"""

from __future__ import annotations

import datetime
import functools
import json
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment

# names a message's reasoning may carry; templates read `reasoning_content` (gpt-oss: `thinking`)
_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


class _GenerationBlock(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` marks assistant text for masks; here it only renders."""

    tags = {"generation"}

    def parse(self, parser: Any) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller: Any) -> str:
        return caller()


class _Namespace(jinja2.utils.Namespace):
    def __init__(*args: Any, **kwargs: Any) -> None:  # noqa: N805 (jinja's own signature trick)
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for name in attrs:
            _Namespace._check(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name: str, value: Any) -> None:
        _Namespace._check(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)

    @staticmethod
    def _check(name: object) -> None:
        if isinstance(name, str) and name.startswith("_"):
            raise jinja2.exceptions.SecurityError(
                f"chat template: namespace attribute {name!r} is not allowed"
            )


def _raise(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    x: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


@functools.lru_cache(maxsize=16)
def compile_template(source: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[_GenerationBlock, jinja2.ext.loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals.update(
        raise_exception=_raise,
        strftime_now=lambda fmt: datetime.datetime.now().strftime(fmt),
        namespace=_Namespace,
    )
    return env.from_string(source)


def _with_reasoning_aliases(message: dict[str, Any]) -> dict[str, Any]:
    reasoning = next((message[k] for k in _REASONING_FIELDS if message.get(k) is not None), None)
    if reasoning is None:
        return dict(message)
    return {"thinking": reasoning, **message, "reasoning_content": reasoning}


def render_chat(
    source: str,
    messages: list[dict[str, Any]],
    add_generation_prompt: bool,
    special_tokens: dict[str, str],
    tools: list[dict[str, Any]] | None = None,
    documents: list[dict[str, Any]] | None = None,
    **template_kwargs: Any,
) -> str:
    """The template's text for one conversation; caller switches override special tokens."""
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            raise TypeError(
                f"chat message {i} must be a dict with 'role' and 'content', got {type(m).__name__}"
            )
    try:
        return compile_template(source).render(
            messages=[_with_reasoning_aliases(m) for m in messages],
            tools=tools,
            documents=documents,
            add_generation_prompt=add_generation_prompt,
            **{**special_tokens, **template_kwargs},
        )
    except jinja2.exceptions.TemplateError as e:
        raise ValueError(f"chat template failed: {e}") from e
