"""The shipped tiny tools models (`--preset tiny-tools`): their files match their manifest, the
policy folder is a hub folder whose chat template renders the calculator's response exactly as
the warm-up taught it, and the build's transcripts are what the runtime's judge reads."""

from __future__ import annotations

import json
import random

from pivot.model import TextTokenizer
from pivot.tiny import synthetic as syn
from pivot.tiny import tools_task as task
from pivot.tiny.shipped import mismatches, read_manifest
from pivot.tiny.tools_build import TOOLS_WEIGHTS, transcript
from pivot.tools.calls import parse_tool_calls
from pivot.tools.render import assistant_message, tool_reply_ids


def test_the_shipped_files_match_their_manifest() -> None:
    manifest = read_manifest(TOOLS_WEIGHTS)
    assert mismatches(TOOLS_WEIGHTS, manifest) == []
    assert manifest["metrics"]["sampled_tool_calls"] < 0.5  # RL has a choice left to learn
    assert manifest["metrics"]["genrm_agreement_transcripts"] >= 0.9


def test_the_runtime_renders_the_calculators_response_as_the_warm_up_taught_it() -> None:
    tok = TextTokenizer.from_pretrained(TOOLS_WEIGHTS / "policy")
    config = json.loads((TOOLS_WEIGHTS / "policy" / "tokenizer_config.json").read_text())
    assert config["chat_template"] == task.CHAT_TEMPLATE == tok.chat_template
    p = syn.Problem(0, 47, 85, "+")
    content, calls = parse_tool_calls(task.tool_call_text(p))
    history = [{"role": "user", "content": syn.policy_prompt(p)}, assistant_message(content, calls)]
    reply = tool_reply_ids(tok, history, ["132"], None, tok.eos_id)
    assert reply == tok.encode(task.tool_reply_text("132"))
    assert tok.apply_chat_template(history[:1]) == tok.encode(syn.policy_prompt(p))


def test_transcripts_end_with_their_answer_and_hold_the_call() -> None:
    rng = random.Random(0)
    for p in syn.generate_problems(50, 3, 2, 2):
        text = transcript(p, rng)
        assert text.startswith("<tool_call>") and "</tool_response>\n" + syn.ANSWER_PREFIX in text
        assert syn.trailing_digits(text)  # what the judge reads as the claimed answer
