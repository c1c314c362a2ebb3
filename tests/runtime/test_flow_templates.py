"""Prompts through chat templates in the RL flow: the policy's prompt with --data.chat-template,
the judge's prompt inside the GenRM's template, and the verdict read after the thinking block.
Oracle: transformers' apply_chat_template on the same tokenizer folder."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from pivot.config import DataConfig, PivotConfig, RewardConfig
from pivot.engine import Output
from pivot.model import TextTokenizer
from pivot.rl.buffer import SampleBuffer
from pivot.rl.data import PromptCursor
from pivot.rl.reward import after_thinking, parse_verdict
from pivot.runtime.flow.rl_flow import RLFlow
from pivot.tiny.task import judge_template, training_set
from tests.model.test_tokenizer import QWEN3_TEMPLATE, _hf_ids, _write_folder

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tok")
    _write_folder(path, QWEN3_TEMPLATE, None)
    return path


def _flow(folder: Path, data_template: bool, raw_prompts: bool = False, **reward: object) -> RLFlow:
    tok = TextTokenizer.from_pretrained(folder)
    data = DataConfig(synthetic_size=8, chat_template=data_template, raw_prompts=raw_prompts)
    cfg = PivotConfig(data=data, reward=RewardConfig(**reward))
    return RLFlow(
        cfg,
        PromptCursor(training_set(cfg.data)),
        tok,
        tok,
        SampleBuffer(2, 1),
        1,
        judge_template(cfg.reward),
    )


def test_chat_prompts_through_the_policy_template_plain_text_raw_unless_asked(folder: Path) -> None:
    prompt = training_set(DataConfig(synthetic_size=8)).prompts[0]  # chat messages, veRL's layout
    templated = _hf_ids(folder, prompt.messages, add_generation_prompt=True)
    raw = TextTokenizer.from_pretrained(folder).encode(prompt.text)
    assert (
        _flow(folder, False).policy_ids(prompt) == templated
    )  # the policy has a template: veRL's rule
    assert _flow(folder, False, raw_prompts=True).policy_ids(prompt) == raw
    plain = dataclasses.replace(prompt, messages=None)
    assert _flow(folder, False).policy_ids(plain) == raw  # plain text stays text by default
    assert (
        _flow(folder, True).policy_ids(plain) == templated
    )  # ... and is one user message on request


@pytest.mark.parametrize("thinking", [True, False])
def test_judge_prompt_in_the_genrm_template_with_its_switch(folder: Path, thinking: bool) -> None:
    flow = _flow(folder, False, enable_thinking=thinking)
    text = "Judge\nResponse:\nAnswer: 4\nProblem: 2+2=?\n"
    expected = _hf_ids(
        folder,
        [{"role": "user", "content": text}],
        add_generation_prompt=True,
        enable_thinking=thinking,
    )
    assert flow.judge_ids(text) == expected
    assert _flow(folder, False, chat_template=False).judge_ids(
        text
    ) == TextTokenizer.from_pretrained(folder).encode(text)


def test_verdict_after_the_thinking_block() -> None:
    assert parse_verdict("<think>maybe Verdict: 0</think>\nVerdict: 1") == 1.0
    assert (
        parse_verdict("hmm Verdict: 0 ... </think> Score: 0.75") == 0.75
    )  # the template opened the block
    assert (
        parse_verdict("<think>Verdict: 1, but let me check") is None
    )  # ran out of tokens while thinking
    assert parse_verdict("<think>x</think> no verdict") is None
    assert parse_verdict("Verdict: yes") == 1.0  # no thinking at all
    assert after_thinking("a</think>b</think>c") == "c"


def test_a_thinking_block_opened_by_the_prompt_is_restored(folder: Path) -> None:
    flow = _flow(folder, False)
    tok = flow.genrm_tok
    opened = tok.encode("<|im_start|>assistant\n<think>\n")
    closed = tok.encode("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    thinking = tok.encode("considering Verdict: 1 but")
    assert parse_verdict(flow.judge_output(Output(0, opened, thinking, [], "length", 0))) is None
    done = tok.encode("considering Verdict: 0 </think> Verdict: 1")
    assert parse_verdict(flow.judge_output(Output(0, opened, done, [], "stop", 0))) == 1.0
    assert (
        parse_verdict(flow.judge_output(Output(0, closed, tok.encode("Verdict: 1"), [], "stop", 0)))
        == 1.0
    )


def test_a_prompt_is_tokenized_once_for_its_group(folder: Path) -> None:
    tok = TextTokenizer.from_pretrained(folder)
    calls = []
    render = tok.apply_chat_template
    tok.apply_chat_template = lambda *a, **k: calls.append(1) or render(*a, **k)
    cfg = PivotConfig(data=DataConfig(synthetic_size=8, chat_template=True))
    flow = RLFlow(
        cfg,
        PromptCursor(training_set(cfg.data)),
        tok,
        tok,
        SampleBuffer(2, 1),
        1,
        judge_template(cfg.reward),
    )
    seqs = flow.fill(version=0, total_steps=1)
    assert len(seqs) == cfg.train.batch_prompts * 2  # group size 2
    assert len(calls) == len(
        {flow.buffer.sample(s.key).prompt.text for s in seqs}
    )  # once per distinct prompt
    seqs[0].request.prompt_ids.append(-1)  # a caller's edit does not reach the cache
    assert flow.policy_ids(flow.buffer.sample(seqs[0].key).prompt)[-1] != -1
