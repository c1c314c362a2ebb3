"""The paper presets' judge prompts (configs/judges/), on the reward role's own path: each preset's
file filled by `GenRMScorer.prompt`, rendered by `RLFlow.judge_ids` through its judge family's
chat template (the hub fixtures' tokenizer folders), and sample judge outputs written the way
that family answers (thinking block, then the score line) read back by `RLFlow.judge_output`
and `GenRMScorer.score`. Also the start-up warning for a real GenRM left with the tiny prompt.
No model runs: tokenizers and templates only."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import pytest

from configs.presets import (
    GLM_GENRM_TOKENS,
    GLM_Z1_CONTEXT,
    JUDGES,
    LONGEST_SAMPLE,
    PAPER_WORLD,
    get_preset,
)
from pivot.config import PivotConfig
from pivot.engine import Output
from pivot.model import TextTokenizer
from pivot.rl.plugins import check_plugins
from pivot.rl.reward import GenRMScorer, judge_prompt, parse_verdict
from pivot.runtime.flow.rl_flow import RLFlow
from pivot.tiny.shipped import WEIGHTS
from pivot.tiny.task import judge_template, judge_template_warning
from tests.model.fixtures.hub_layouts import write_header_only, write_tokenizer

# preset -> (its GenRM, its judge prompt file, the generation prompt its chat template ends with)
FAMILIES = {
    "qwen2.5-1.5b+glm-z1-9b": ("GLM-Z1-9B-0414", "glm_z1.txt", "<|assistant|>\n<think>"),
    "qwen2.5-7b+qwen3-30b-a3b": ("Qwen3-30B-A3B", "qwen3.txt", "<|im_start|>assistant\n"),
    "qwen2.5-32b+qwen3-30b-a3b": ("Qwen3-30B-A3B", "qwen3.txt", "<|im_start|>assistant\n"),
    "qwen2.5-72b+qwen3.5-122b-a10b": (
        "Qwen3.5-122B-A10B",
        "qwen3_5.txt",
        "<|im_start|>assistant\n<think>\n",
    ),
}
# a DAPO-Math row: LaTeX braces in the question and a \boxed{} answer in the response
QUESTION = (
    "Solve the following math problem step by step. The last line of your response should be of "
    "the form Answer: $Answer (without quotes) where $Answer is the answer to the problem.\n\n"
    "Let $f(x) = x^2 + 1$. Find $f\\left(\\frac{1}{2}\\right)$."
)
RESPONSE = (
    "We substitute: $f(\\frac{1}{2}) = \\frac{1}{4} + 1 = \\frac{5}{4}$, so the value is "
    "$\\boxed{\\frac{5}{4}}$.\n\nAnswer: \\frac{5}{4}"
)
REASONING = "The problem asks for f(1/2). I get 1/4 + 1 = 5/4, and the solution also gets 5/4."


def test_every_paper_preset_names_its_family_prompt() -> None:
    assert set(FAMILIES) == set(PAPER_WORLD)
    assert get_preset("tiny-cpu").reward.judge_template_file == ""
    for name, (_, file, _) in FAMILIES.items():
        path = Path(get_preset(name).reward.judge_template_file)
        # absolute: the same file from any working directory (tests, torchrun from the repo root)
        assert path.is_absolute() and path == JUDGES / file and path.is_file()


@pytest.mark.parametrize("file", sorted({f for _, f, _ in FAMILIES.values()}))
def test_prompt_file_states_the_parsed_format(file: str) -> None:
    text = (JUDGES / file).read_text()
    assert text.count("{question}") == 1 and text.count("{response}") == 1
    # the last line is the format the parser reads; the instructions forbid what it does not read
    assert text.rstrip("\n").splitlines()[-1] == "Score: S"
    assert "from 0 to 1" in text and "no \\boxed{}" in text and "no bold" in text
    # GLM's template keeps only what follows a '</think>' in a user message
    assert "</think>" not in text and "<think>" not in text
    check_plugins(get_preset(next(n for n, f in FAMILIES.items() if f[1] == file)).reward)


def test_glm_prompt_fits_the_dry_run_byte_bound() -> None:
    """Without a tokenizer `--dry-run` bounds the judge template by its bytes; GLM-Z1's context
    leaves the template 1024 (GLM_GENRM_TOKENS)."""
    spare = GLM_Z1_CONTEXT - LONGEST_SAMPLE - GLM_GENRM_TOKENS
    text = judge_template(get_preset("qwen2.5-1.5b+glm-z1-9b").reward)
    assert len(judge_prompt("", "", text).encode()) <= spare


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, TextTokenizer]:
    root = tmp_path_factory.mktemp("judges")
    out = {}
    for genrm in {g for g, _, _ in FAMILIES.values()}:
        write_header_only(genrm, root / genrm)
        write_tokenizer(root / genrm)
        tok = TextTokenizer.from_pretrained(root / genrm)
        # one (non-special) token each, as in the real vocabularies: judge_output reads the
        # prompt's last tokens for an opened thinking block
        tok.tok.add_tokens(["<think>", "</think>"])
        out[genrm] = tok
    return out


def _flow(
    name: str, tokenizers: dict[str, TextTokenizer], fallback: float = 0.0
) -> tuple[SimpleNamespace, GenRMScorer]:
    """What `RLFlow` holds for the reward side: the config, the GenRM tokenizer and the scorer
    made as its __post_init__ makes it."""
    cfg: PivotConfig = get_preset(name)
    flow = SimpleNamespace(cfg=cfg, genrm_tok=tokenizers[FAMILIES[name][0]])
    reward = dataclasses.replace(
        cfg.reward,
        judge_template=judge_template(cfg.reward),
        judge_template_file="",
        fallback_score=fallback,
    )
    return flow, GenRMScorer(reward)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_rendered_through_the_family_chat_template(
    name: str, tokenizers: dict[str, TextTokenizer]
) -> None:
    flow, scorer = _flow(name, tokenizers)
    judge = scorer.prompt(QUESTION, RESPONSE)
    assert QUESTION in judge and RESPONSE in judge and judge.rstrip().endswith("Score: S")
    rendered = flow.genrm_tok.decode(RLFlow.judge_ids(flow, judge), keep_special=True)
    assert rendered == flow.genrm_tok.render_chat(
        [{"role": "user", "content": judge}], enable_thinking=True
    )
    assert judge.strip() in rendered  # the whole prompt, braces and all, one user turn
    assert rendered.endswith(FAMILIES[name][2])  # the assistant's turn opens (and its thinking)


def _outputs(opens: str) -> list[tuple[str, float | None]]:
    """(generated text, score) in a reasoning judge's shape; `opens` is the `<think>` the model
    writes itself when its chat template has not opened the block (Qwen3)."""
    return [
        (f"{opens}{REASONING}\n</think>\n\nThe final answer 5/4 is correct.\n\nScore: 1", 1.0),
        # what it considers while thinking does not count; the line after the block does
        (
            f"{opens}At first sight Verdict: 0 and Score: 0, but {REASONING}\n</think>\n\n"
            "Correct, with one step left unexplained.\nScore: 0.85",
            0.85,
        ),
        (f"{opens}{REASONING}\n</think>\n\n**Score:** 0.35", 0.35),  # markdown bold
        (f"{opens}{REASONING}\n</think>\n\n**Score: 0.8**", 0.8),
        (f"{opens}{REASONING}\n</think>\n\n**Verdict:** 1", 1.0),
        (f"{opens}{REASONING}\n</think>\n\nScore: 7/10", 0.7),
        # still thinking when max_new_tokens ran out: no verdict, whatever it was weighing
        (f"{opens}{REASONING} So Score: 1 would fit, unless the second step", None),
        (f"{opens}{REASONING}\n</think>\n\nThe solution is correct.", None),  # no score line
        (f"{opens}{REASONING}\n</think>\n\nScore: S", None),  # the format's placeholder, copied
        (f"{opens}{REASONING}\n</think>\n\nScore: 1.5", None),  # out of range
    ]


@pytest.mark.parametrize("name", list(FAMILIES))
def test_judge_outputs_parse_as_the_reward_role_reads_them(
    name: str, tokenizers: dict[str, TextTokenizer]
) -> None:
    flow, scorer = _flow(name, tokenizers, fallback=0.25)
    tok = flow.genrm_tok
    prompt_ids = RLFlow.judge_ids(flow, scorer.prompt(QUESTION, RESPONSE))
    opens = "" if FAMILIES[name][2].endswith(("<think>", "<think>\n")) else "<think>\n"
    cases = _outputs(opens)
    for generated, want in cases:
        ids = tok.encode(generated) + [tok.eos_id]
        out = Output(0, prompt_ids, ids, [0.0] * len(ids), "stop", 0)
        text = RLFlow.judge_output(flow, out)
        assert text.startswith("<think>")  # the block is whole again, whoever opened it
        got = parse_verdict(text)
        assert (got is None) if want is None else got == pytest.approx(want), generated
        assert scorer.score(text) == pytest.approx(0.25 if want is None else want)
    unparsable = sum(want is None for _, want in cases)
    # `count/unparsable_verdicts` in the run's metrics (pivot/runtime/flow/flow_reports.py)
    assert (scorer.stats.verdicts, scorer.stats.unparsable_verdicts) == (len(cases), unparsable)


def test_warning_for_a_real_genrm_with_the_tiny_prompt() -> None:
    cfg = get_preset("qwen2.5-7b+qwen3-30b-a3b")
    assert judge_template_warning(cfg) is None  # the preset's file
    bare = cfg.replace(reward=dataclasses.replace(cfg.reward, judge_template_file=""))
    line = judge_template_warning(bare)
    assert line is not None and "\n" not in line
    assert line.startswith("pivot: warning: GenRM /models/Qwen3-30B-A3B judges with the tiny")
    assert "--reward.judge-template-file" in line and "configs/judges/" in line
    inline = bare.replace(
        reward=dataclasses.replace(bare.reward, judge_template="{question} {response} Score:")
    )
    assert judge_template_warning(inline) is None
    assert judge_template_warning(get_preset("tiny-cpu")) is None  # the embedded tiny GenRM
    named_tiny = bare.replace(model=dataclasses.replace(bare.model, genrm=str(WEIGHTS / "genrm")))
    assert judge_template_warning(named_tiny) is None
