"""Verifiable reward, judge prompt and verdict parsing."""

from __future__ import annotations

import pytest

from pivot.config import RewardConfig
from pivot.rl.reward import (
    GenRMScorer,
    extract_answer,
    judge_prompt,
    normalize_answer,
    parse_verdict,
    total_reward,
    verify,
)
from pivot.tiny import synthetic
from pivot.tiny.task import judge_template


@pytest.mark.parametrize(
    ("response", "truth", "expected"),
    [
        ("work\nAnswer: 42", "42", 1.0),
        ("Answer: 41", "42", 0.0),
        ("no answer here 42", "42", 0.0),
        ("so \\boxed{\\frac{1}{2}}.", "0.5", 1.0),
        ("\\boxed{\\dfrac12}", "1/2", 1.0),
        ("Answer: $1,000$.", "1000", 1.0),
        ("Answer: -3", "-3", 1.0),
        ("Answer: 0.50", "\\frac{1}{2}", 1.0),
        ("Answer: 007", "7", 1.0),
        ("Answer: 1\nlater \\boxed{2}", "2", 1.0),  # the last stated answer wins
        ("\\boxed{2} then Answer: 1", "2", 0.0),
        ("Answer: \\boxed{x+1}", "x + 1", 1.0),
        ("Answer: \\text{Yes}", "yes", 1.0),
        ("Answer: 1/0", "1/0", 1.0),  # not a number: compared as text
    ],
)
def test_verify(response: str, truth: str, expected: float) -> None:
    assert verify(response, truth) == expected


def test_synthetic_worked_solution_verifies() -> None:
    for p in synthetic.generate_problems(20, seed=3):
        assert verify(synthetic.worked_solution(p), p.answer) == 1.0
        assert verify(synthetic.worked_solution(p), str(int(p.answer) + 1)) == 0.0


def test_extract_and_normalize() -> None:
    assert extract_answer("\\boxed{a{b}c}") == "a{b}c"
    assert extract_answer("nothing") is None
    assert normalize_answer(" 3/6 ") == "1/2"
    assert normalize_answer("-\\frac{2}{4}") == "-1/2"


@pytest.mark.parametrize(
    ("text", "score"),
    [
        ("reasoning\nVerdict: 1", 1.0),
        ("Verdict: 0", 0.0),
        ("verdict: 0.75", 0.75),
        ("Score: 7/10", 0.7),
        ("VERDICT = 75%", 0.75),
        ("Verdict: correct", 1.0),
        ("Verdict: incorrect", 0.0),
        ("Verdict: 0\n... Verdict: 1", 1.0),  # the last one counts
        ("Verdict: 3", None),  # out of range
        ("Verdict: maybe", None),
        ("no verdict at all", None),
        ("Verdict:", None),
        ("Score: 1/0", None),
    ],
)
def test_parse_verdict(text: str, score: float | None) -> None:
    assert parse_verdict(text) == (pytest.approx(score) if score is not None else None)


def test_judge_prompt_uses_template() -> None:
    default = judge_prompt(
        "Problem: 1+1=?", "Answer: 2", judge_template(RewardConfig())
    )  # tiny task's
    assert default == synthetic.judge_prompt("Problem: 1+1=?", "Answer: 2")
    assert judge_prompt("Q", "R", "<{question}|{response}>") == "<Q|R>"
    with pytest.raises(ValueError, match="response"):
        judge_prompt("Q", "R", "{question} only")
    with pytest.raises(ValueError, match="question"):
        GenRMScorer(RewardConfig(judge_template="{response}"))
    with pytest.raises(ValueError, match="question"):  # rl has no default: the template is an input
        judge_prompt("Q", "R", "")


def test_scorer_fallback_counter_and_total() -> None:
    cfg = RewardConfig(
        fallback_score=0.25, w_verifiable=1.0, w_genrm=0.5, judge_template=synthetic.JUDGE_TEMPLATE
    )
    scorer = GenRMScorer(cfg)
    assert scorer.score("Verdict: 1") == 1.0
    assert scorer.score("garbage") == 0.25
    assert scorer.stats.unparsable_verdicts == 1 and scorer.stats.verdicts == 2
    assert total_reward(1.0, 0.5, cfg) == pytest.approx(1.25)
    assert total_reward(1.0, None, cfg) == 1.0
    with pytest.raises(ValueError, match="fallback_score"):
        RewardConfig(fallback_score=2.0)
