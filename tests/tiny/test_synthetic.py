"""The synthetic arithmetic task: formats, determinism, correct answers, judge targets."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pivot.rl.reward import verify
from pivot.tiny import synthetic as syn

LINE = re.compile(r"^(\d)([+-])(\d)([+-])([01])=(\d) ([cb])([01])$")


def test_generation_is_deterministic_and_seed_dependent() -> None:
    assert syn.generate_problems(50, seed=3) == syn.generate_problems(50, seed=3)
    assert syn.generate_problems(50, seed=3) != syn.generate_problems(50, seed=4)
    assert [p.id for p in syn.generate_problems(5, seed=0)] == [0, 1, 2, 3, 4]


@pytest.mark.parametrize("lo,hi", [(1, 1), (2, 4), (1, 6), (6, 6)])
def test_digit_range_and_both_ops(lo: int, hi: int) -> None:
    problems = syn.generate_problems(300, seed=0, min_digits=lo, max_digits=hi)
    assert {p.digits for p in problems} == set(range(lo, hi + 1))
    assert {p.op for p in problems} == {"+", "-"}
    for p in problems:
        assert lo <= len(str(p.a)) <= hi and lo <= len(str(p.b)) <= hi
        assert int(p.answer) >= 0


def test_bad_arguments_name_the_field() -> None:
    with pytest.raises(ValueError, match="min_digits"):
        syn.generate_problems(3, 0, min_digits=0)
    with pytest.raises(ValueError, match="max_digits"):
        syn.generate_problems(3, 0, min_digits=4, max_digits=2)
    with pytest.raises(ValueError, match="op"):
        syn.Problem(0, 1, 2, "*")
    with pytest.raises(ValueError, match="a >= b"):
        syn.Problem(0, 1, 2, "-")


def test_prompt_and_solution_format() -> None:
    p = syn.Problem(id=7, a=4821, b=377, op="+")
    assert syn.policy_prompt(p) == "Problem: 4821+377=?\n"
    assert syn.worked_solution(p) == "1+7+0=8 c0\n2+7+0=9 c0\n8+3+0=1 c1\n4+0+1=5 c0\nAnswer: 5198"
    q = syn.Problem(id=8, a=1000, b=1, op="-")
    assert syn.worked_solution(q).splitlines()[-1] == "Answer: 999"  # leading zero dropped


def _check_columns(a: int, op: str, b: int) -> None:
    lines = syn.column_lines(a, op, b)
    assert len(lines) == len(str(max(a, b)))
    carry, digits = 0, []
    for i, line in enumerate(lines):
        m = LINE.match(line)
        assert m, line
        x, y, c_in, d, k = int(m[1]), int(m[3]), int(m[5]), int(m[6]), int(m[8])
        assert (x, y) == (a // 10**i % 10, b // 10**i % 10) and c_in == carry
        value = x + y + c_in if op == "+" else x - y - c_in
        assert d == value % 10 and k == int(value >= 10 or value < 0)
        carry, digits = k, [str(d)] + digits
    assert int(("1" if carry and op == "+" else "") + "".join(digits)) == (
        a + b if op == "+" else a - b
    )


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 999_999), st.integers(0, 999_999), st.sampled_from(["+", "-"]))
def test_columns_are_correct_arithmetic(a: int, b: int, op: str) -> None:
    if op == "-" and a < b:
        a, b = b, a
    _check_columns(a, op, b)
    p = syn.Problem(0, a, b, op)
    assert verify(syn.worked_solution(p), p.answer) == 1.0


def test_every_generated_solution_is_right() -> None:
    for p in syn.generate_problems(500, seed=1):
        assert verify(syn.worked_solution(p), str(eval(f"{p.a}{p.op}{p.b}"))) == 1.0


def test_wrong_solutions_are_wrong_and_plausible() -> None:
    rng = random.Random(0)
    for p in syn.generate_problems(400, seed=2):
        wrong = syn.wrong_solution(p, rng)
        assert "Answer: " in wrong and verify(wrong, p.answer) == 0.0
        assert len(wrong.splitlines()) == p.digits + 1


def test_judge_prompt_and_reasoning() -> None:
    p = syn.Problem(0, 93, 8, "-")
    prompt = syn.judge_prompt(syn.policy_prompt(p), syn.worked_solution(p))
    assert prompt == syn.JUDGE_TEMPLATE.format(
        question="Problem: 93-8=?", response=syn.worked_solution(p)
    )
    right = syn.judge_reasoning(syn.policy_prompt(p), syn.worked_solution(p))
    assert (
        right
        == "5 3-8-0=5 5= b1 =\n8 9-0-1=8 8= b0 =\n_ 0-0-0=0 _= b0 =\n_ 0-0-0=0 _= b0 =\nVerdict: 1"
    )
    wrong = syn.judge_reasoning(p.question, "3-8-0=5 b1\n9-0-1=8 b0\nAnswer: 95")
    assert (
        wrong
        == "5 3-8-0=5 5= b1 =\n9 9-0-1=8 9! b0 !\n_ 0-0-0=0 _= b0 !\n_ 0-0-0=0 _= b0 !\nVerdict: 0"
    )
    extra_digit = syn.judge_reasoning(p.question, "Answer: 185")
    assert extra_digit.endswith("1 0-0-0=0 1! b0 !\n_ 0-0-0=0 _= b0 !\nVerdict: 0")
    assert syn.judge_reasoning(p.question, "garbage").endswith("Verdict: 0")
    with pytest.raises(ValueError, match="question"):
        syn.judge_reasoning("what?", "Answer: 1")


@pytest.mark.parametrize("seed", range(3))
def test_judge_marks_agree_with_correctness(seed: int) -> None:
    """The last running mark is the verdict for every well-formed candidate, right or wrong,
    including dropped leading zeros and a final carry."""
    rng = random.Random(seed)
    for p in syn.generate_problems(400, seed=seed, max_digits=4) + [
        syn.Problem(1, 100, 95, "-"),
        syn.Problem(2, 999, 1, "+"),
    ]:
        for response in (
            syn.worked_solution(p),
            syn.wrong_solution(p, rng),
            syn.wrong_answer_solution(p, rng),
        ):
            text = syn.judge_reasoning(syn.policy_prompt(p), response)
            last_mark, verdict = text.splitlines()[-2][-1], text.splitlines()[-1]
            assert verdict == f"Verdict: {int(last_mark == '=')}"
            assert verdict == f"Verdict: {int(verify(response, p.answer))}"
    assert (
        syn.trailing_digits("x\nAnswer: 0042 ") == "0042"
        and syn.trailing_digits("Answer: none") == ""
    )


def test_wrong_answer_solution_keeps_the_columns() -> None:
    rng = random.Random(0)
    for p in syn.generate_problems(200, seed=1):
        text = syn.wrong_answer_solution(p, rng)
        assert verify(text, p.answer) == 0.0
        assert text.splitlines()[:-1] == syn.column_lines(p.a, p.op, p.b)


def test_rows_have_the_dapo_shape() -> None:
    problems = syn.generate_problems(3, seed=0)
    rows = syn.to_rows(problems)
    for p, row in zip(problems, rows):
        assert row["prompt"] == [{"role": "user", "content": syn.policy_prompt(p)}]
        assert row["reward_model"] == {"style": "rule", "ground_truth": p.answer}
        assert row["data_source"] == syn.DATA_SOURCE and row["extra_info"]["index"] == p.id
