"""The tokens a policy reads between two of its turns: the tools' responses as its chat template
renders tool messages, and the generation prompt of its next turn.

The policy's turn ended at its end-of-turn token (Qwen's `<|im_end|>`), so what follows is the
template's text after that token: the rest of the assistant message's rendering (Qwen's "\\n"),
the tool messages, and the next generation prompt. It is read off the template's rendering of
the whole conversation, after the end-of-turn token that closes the policy's message: the
rendering up to that message (the prompt it answered) is the same with or without it, but the
message itself may not be (Qwen3 writes an empty `<think>` block into a last assistant message
and not into one that tool messages follow), so it is found, not assumed. veRL's agent loop
renders the tool messages on their own and cuts the template's preamble off instead. Nothing
the policy made is re-tokenized: its own tokens stay as it sampled them.

A tokenizer without a chat template (the raw-prompt tasks) gets the hermes form as plain text:
`<tool_response>\\n...\\n</tool_response>\\n` per response.
"""

from __future__ import annotations

from typing import Any

from pivot.model import TextTokenizer
from pivot.tools.calls import ToolCall


def assistant_message(content: str, calls: list[ToolCall]) -> dict[str, Any]:
    """The policy's turn as a chat message, its tool calls in OpenAI's form (what templates read)."""
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [
            {
                "type": "function",
                "function": {"name": c.name, "arguments": c.arguments if c.arguments else {}},
            }
            for c in calls
        ]
    return message


def tool_reply_ids(
    tok: TextTokenizer,
    history: list[dict[str, Any]],
    responses: list[str],
    schemas: list[dict[str, Any]] | None,
    turn_end: int,
) -> list[int]:
    """Token ids after the policy's end-of-turn token `turn_end` (the last token of its turn):
    `responses` (one per call, in order) as tool messages, then the generation prompt. `history`
    ends with the policy's assistant message."""
    if tok.chat_template is None:
        return tok.encode("".join(f"<tool_response>\n{r}\n</tool_response>\n" for r in responses))
    tools = [{"role": "tool", "content": r} for r in responses]
    prompt = tok.render_chat(history[:-1], add_generation_prompt=True, tools=schemas)
    whole = tok.render_chat(history + tools, add_generation_prompt=True, tools=schemas)
    end = tok.decode([turn_end], keep_special=True)
    cut = whole.find(end, len(prompt)) if end and whole.startswith(prompt) else -1
    if cut < 0:
        raise ValueError(
            f"the chat template's rendering of a conversation with tool messages does not close "
            f"the policy's turn with {end!r} after the prompt it answered, so the tool responses "
            "cannot be appended to the policy's tokens"
        )
    return tok.encode(whole[cut + len(end) :])
