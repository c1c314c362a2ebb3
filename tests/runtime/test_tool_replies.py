"""The tokens a policy reads between its turns (pivot/tools/render.py) for the paper's hermes
families' hub templates: the policy's prompt, its turn as the template renders it, then Pivot's
reply tokens read as transformers renders the whole conversation with the tool messages (its own
Jinja renderer is the oracle); and a row's `extra_info.tools_kwargs` reaches the tool runner."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pivot.config import DataConfig, PivotConfig, ToolsConfig
from pivot.engine import Output
from pivot.engine.sequence import VersionRanges
from pivot.model import TextTokenizer
from pivot.rl.buffer import SampleBuffer
from pivot.rl.data import PromptCursor, rows_to_dataset
from pivot.runtime.flow.rl_flow import RLFlow
from pivot.tiny.tools_build import TOOLS_WEIGHTS
from pivot.tools.calls import ToolCall, parse_tool_calls
from pivot.tools.render import assistant_message, tool_reply_ids
from tests.model.fixtures.hub_layouts import write_tiny, write_tokenizer
from tests.model.fixtures.hub_models import EOS_TOKENS, MODELS

CALC = {
    "type": "function",
    "function": {
        "name": "calc",
        "description": "Add or subtract two numbers.",
        "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}},
    },
}


@pytest.mark.parametrize("name", ["Qwen2.5-1.5B", "Qwen3-30B-A3B", "Qwen3.5-122B-A10B"])
def test_replies_read_as_transformers_renders_the_conversation(tmp_path: Path, name: str) -> None:
    transformers = pytest.importorskip("transformers")
    render = transformers.utils.chat_template_utils.render_jinja_template
    folder = write_tiny(name, tmp_path / name, shards=1)
    write_tokenizer(folder)
    tok = TextTokenizer.from_pretrained(folder)
    eos = EOS_TOKENS[MODELS[name]["config"]["model_type"]]
    end = "<|im_end|>"  # a chat turn's end (the base Qwen2.5's EOS is <|endoftext|>)
    (turn_end,) = tok.encode(end)
    user = {"role": "user", "content": "What is 47+85, then that minus 9?"}
    turn = '<tool_call>\n{"name": "calc", "arguments": {"expr": "47+85"}}\n</tool_call>'
    content, calls = parse_tool_calls(turn)
    first = [user, assistant_message(content, calls)]
    second = first + [{"role": "tool", "content": "132"}, assistant_message(content, calls)]
    for history in (first, second):  # the first turn's replies, then the second's
        for responses in (["132"], ["132", "Error: tool calc timed out after 30 s"]):
            reply = tok.decode(
                tool_reply_ids(tok, history, responses, [CALC], turn_end), keep_special=True
            )
            tools = [{"role": "tool", "content": r} for r in responses]
            (whole,), _ = render(
                [history + tools], tools=[CALC], chat_template=tok.chat_template,
                add_generation_prompt=True, eos_token=eos,
            )  # fmt: skip
            # what follows the policy's turn in transformers' rendering of the conversation
            # (Qwen's templates put consecutive tool responses in one user message)
            assert whole.endswith(end + reply) and reply.count(end) == 1, name
            assert reply.count("<tool_response>") == len(responses), (name, reply)
            # the next generation prompt (Qwen3.5's opens its thinking block)
            assert reply.rsplit("<|im_start|>", 1)[1] in ("assistant\n", "assistant\n<think>\n")


class Recorder:
    """A tool runner that records what it is asked and answers nothing."""

    def __init__(self) -> None:
        self.asked: list[tuple[Any, list[ToolCall], dict]] = []

    def run_calls(self, episode: Any, calls: list[ToolCall], tools_kwargs: dict) -> None:
        self.asked.append((episode, calls, tools_kwargs))

    def finish(self, episode: Any) -> None: ...

    def drop(self, episode: Any) -> None: ...

    def poll(self) -> list[Any]:
        return []

    def close(self) -> None: ...


def test_a_rows_tools_kwargs_reach_the_runner() -> None:
    kwargs = {"calc": {"create_kwargs": {"ground_truth": "132"}}}
    rows = [
        {
            "prompt": [{"role": "user", "content": "Problem: 47+85=?\n"}],
            "reward_model": {"ground_truth": "132"},
            "extra_info": {"tools_kwargs": kwargs},
        }
    ]
    config = Path(__file__).resolve().parents[2] / "configs" / "tools" / "calculator.yaml"
    cfg = PivotConfig(tools=ToolsConfig(config=str(config)))
    cfg = cfg.replace(train=cfg.train.__class__(batch_prompts=1, group_size=2))
    tok = TextTokenizer.from_pretrained(TOOLS_WEIGHTS / "policy")
    runner = Recorder()
    flow = RLFlow(
        cfg,
        PromptCursor(rows_to_dataset(rows, DataConfig(), "rows")),
        tok,
        tok,
        SampleBuffer(2, 1),
        1,
        "{question}{response}",
        tool_runner=runner,
    )
    seq = flow.fill(0, 1)[0]
    turn = tok.encode('<tool_call>{"name": "calc", "arguments": {"expr": "47+85"}}</tool_call>')
    ids = turn + [tok.eos_id]
    out = Output(
        seq.seq_id, seq.request.prompt_ids, ids, [0.0] * len(ids), "stop", 0, VersionRanges()
    )
    assert flow.on_output(out) == []  # the episode waits for its tool
    ((_, calls, got),) = runner.asked  # the row's kwargs, as veRL passes them on
    assert got == kwargs and calls[0].arguments == {"expr": "47+85"}
