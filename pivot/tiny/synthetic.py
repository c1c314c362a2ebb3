"""The synthetic arithmetic task behind the embedded default (tiny policy + tiny GenRM).

Problems are additions and subtractions of 1..6-digit numbers, deterministic from a seed.
Subtractions always have a >= b, so every answer is a non-negative integer.

Policy side: `policy_prompt` is the prompt, `worked_solution` the target: one line per digit
column, least significant first, carrying (``c``) or borrowing (``b``) explicitly, then the
final ``Answer: N`` line that `pivot.rl.reward.verify` reads. More digits -> more lines, so
rollout lengths have a tail.

GenRM side: `judge_prompt` fills `JUDGE_TEMPLATE` with the question and a candidate response;
`judge_reasoning` is the judge's target. It recomputes the sum column by column (plus two zero
columns that catch a missing or extra leading digit) and, on each column's line, first reads
the candidate's final answer digit for that column (``_`` once its digits run out), then writes
its own digit, the candidate's digit again right next to it with a mark comparing the two
(``=`` or ``!``) and, at the line's end, a running mark: ``=`` while every column so far
matched, ``!`` from the first mismatch on. It ends with
``Verdict: 1`` or ``Verdict: 0`` (`VERDICT_PREFIX` + a score in [0, 1]), which repeats the
last running mark. Every step is a lookup at a fixed distance, which a 2-layer model learns
in a minute; comparing two whole numbers written lines apart, which it did not learn, is never
needed. The candidate's answer digits sit right before the question, so they are found the
same way as the operands' digits.

Pure Python: no torch, so data loaders and tests import it cheaply.
"""

from __future__ import annotations

import dataclasses
import random
import re
from typing import Any

from pivot.rl.reward import verify

ANSWER_PREFIX = "Answer: "
VERDICT_PREFIX = "Verdict: "
DATA_SOURCE = "pivot/arith"
# `{question}` is the policy prompt (or the bare question), `{response}` the candidate solution
# the question comes last, right before the judge's own column work, exactly where the policy
# sees it: the judge reuses the policy's arithmetic instead of reaching back past the response
JUDGE_TEMPLATE = "Judge\nResponse:\n{response}\n{question}\n"
OPS = ("+", "-")

_PROBLEM_RE = re.compile(r"(\d+)\s*([+-])\s*(\d+)")


@dataclasses.dataclass(frozen=True)
class Problem:
    id: int
    a: int
    b: int
    op: str  # "+" or "-"

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"Problem.op must be one of {OPS}, got {self.op!r}")
        if self.a < 0 or self.b < 0:
            raise ValueError(f"Problem operands must be non-negative, got a={self.a} b={self.b}")
        if self.op == "-" and self.a < self.b:
            raise ValueError(f"Problem subtraction needs a >= b, got a={self.a} b={self.b}")

    @property
    def question(self) -> str:
        return f"{self.a}{self.op}{self.b}=?"

    @property
    def answer(self) -> str:
        return str(self.a + self.b if self.op == "+" else self.a - self.b)

    @property
    def digits(self) -> int:
        """Number of digit columns, i.e. of worked lines."""
        return len(str(max(self.a, self.b)))


def _random_number(rng: random.Random, digits: int) -> int:
    return rng.randint(0 if digits == 1 else 10 ** (digits - 1), 10**digits - 1)


def generate_problems(n: int, seed: int, min_digits: int = 1, max_digits: int = 6) -> list[Problem]:
    """`n` problems; the column count is uniform in [min_digits, max_digits], the shorter
    operand has a uniform digit count up to it, and + / - are equally likely."""
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if not 1 <= min_digits <= max_digits:
        raise ValueError(
            f"need 1 <= min_digits <= max_digits, got min_digits={min_digits} max_digits={max_digits}"
        )
    rng = random.Random(seed)
    problems = []
    for i in range(n):
        digits = rng.randint(min_digits, max_digits)
        a = _random_number(rng, digits)
        b = _random_number(rng, rng.randint(min_digits, digits))
        op = rng.choice(OPS)
        if rng.random() < 0.5:
            a, b = b, a
        if op == "-" and a < b:
            a, b = b, a
        problems.append(Problem(id=i, a=a, b=b, op=op))
    return problems


def parse_question(question: str) -> tuple[int, str, int]:
    """(a, op, b) from a question or prompt such as 'Problem: 4821+377=?'."""
    m = _PROBLEM_RE.search(question)
    if m is None:
        raise ValueError(f"question {question!r} holds no 'a+b' or 'a-b'")
    return int(m.group(1)), m.group(2), int(m.group(3))


def policy_prompt(problem: Problem) -> str:
    return f"Problem: {problem.question}\n"


def column_lines(a: int, op: str, b: int) -> list[str]:
    """The digit-by-digit work, least significant column first: 'x+y+c=d cK' / 'x-y-c=d bK'
    (x, y the column's digits, c the incoming carry/borrow, d the result digit, K the outgoing)."""
    return _columns(a, op, b)[0]


def _column_steps(
    a: int, op: str, b: int, extra: int = 0, fault_col: int = -1, fault: str = "", delta: int = 1
) -> list[tuple[int, int, int, int, int]]:
    """(x, y, carry in, digit, carry out) per column, least significant first, plus `extra`
    zero columns; `fault` ('digit' or 'carry') injects one slip at column `fault_col`, later
    columns following on consistently (a plausible mistake)."""
    da, db = str(a)[::-1], str(b)[::-1]
    carry, steps = 0, []
    for i in range(max(len(da), len(db)) + extra):
        x = int(da[i]) if i < len(da) else 0
        y = int(db[i]) if i < len(db) else 0
        value = x + y + carry if op == "+" else x - y - carry
        out = 1 if value >= 10 or value < 0 else 0
        digit = value % 10
        if i == fault_col and fault == "digit":
            digit = (digit + delta) % 10
        if i == fault_col and fault == "carry":
            out = 1 - out
        steps.append((x, y, carry, digit, out))
        carry = out
    return steps


def _columns(
    a: int, op: str, b: int, fault_col: int = -1, fault: str = "", delta: int = 1
) -> tuple[list[str], str]:
    """Column lines and the answer read off them (a slip as in `_column_steps`)."""
    steps = _column_steps(a, op, b, 0, fault_col, fault, delta)
    digits = [str(s[3]) for s in steps]
    if op == "+" and steps[-1][4]:
        digits.append("1")
    flag = "c" if op == "+" else "b"
    lines = [f"{x}{op}{y}{op}{carry}={digit} {flag}{out}" for x, y, carry, digit, out in steps]
    return lines, str(int("".join(reversed(digits))))


def worked_solution(problem: Problem) -> str:
    """Column lines then 'Answer: N' (no trailing newline; the model ends it with EOS)."""
    lines = column_lines(problem.a, problem.op, problem.b)
    return "\n".join(lines + [ANSWER_PREFIX + problem.answer])


def wrong_solution(problem: Problem, rng: random.Random) -> str:
    """A plausible but wrong worked solution: a misread operand digit, a slipped column digit,
    a dropped/invented carry, or a mistyped final answer (GenRM training and evaluation)."""
    for _ in range(100):
        kind = rng.choice(("operand", "digit", "carry", "answer"))
        a, b = problem.a, problem.b
        col = rng.randrange(problem.digits)
        if kind == "operand":
            which = rng.choice("ab")
            text = list(str(a if which == "a" else b))
            pos = rng.randrange(len(text))
            text[pos] = str((int(text[pos]) + rng.randint(1, 9)) % 10)
            a, b = (int("".join(text)), b) if which == "a" else (a, int("".join(text)))
            if problem.op == "-" and a < b:
                continue
            lines, answer = _columns(a, problem.op, b)
        elif kind == "answer":
            lines = column_lines(a, problem.op, b)
            text = list(problem.answer)
            pos = rng.randrange(len(text))
            text[pos] = str((int(text[pos]) + rng.randint(1, 9)) % 10)
            answer = str(int("".join(text)))
        else:
            lines, answer = _columns(a, problem.op, b, col, kind, rng.randint(1, 9))
        if answer != problem.answer:
            return "\n".join(lines + [ANSWER_PREFIX + answer])
    raise RuntimeError(f"could not corrupt problem {problem}")  # unreachable in practice


def wrong_answer_solution(problem: Problem, rng: random.Random) -> str:
    """The right worked columns, then a random wrong final answer of at most as many digits.
    Judge training uses many of these: when the candidate's digits mostly agree with the
    judge's own, a judge learns to copy them instead of computing, and checks nothing."""
    while True:
        answer = str(rng.randrange(10 ** len(problem.answer)))
        if answer != problem.answer:
            return "\n".join(
                column_lines(problem.a, problem.op, problem.b) + [ANSWER_PREFIX + answer]
            )


def judge_prompt(question: str, response: str) -> str:
    return JUDGE_TEMPLATE.format(question=question.strip(), response=response.strip())


def judge_reasoning(question: str, response: str) -> str:
    """The GenRM's target text. Line per column, least significant first: ``g x+y+c=d gm fK r``
    with g the candidate's digit there, read before the judge's own digit d; g repeated next to
    d, so that m (whether they agree) compares neighbours rather than tokens eight apart, which
    a 2-layer model did not learn; f the carry/borrow flag; r the running mark (kept apart
    from m: folded into one, "copy the last mark" absorbed the signal and mismatches went
    unseen). The verdict is the last running mark, which equals
    true correctness (`verify(response, answer)`) whenever the response ends with its
    answer, as every well-formed response does."""
    a, op, b = parse_question(question)
    claimed = trailing_digits(response)[::-1]
    matched, lines, flag = True, [], "c" if op == "+" else "b"
    for col, (x, y, carry, digit, out) in enumerate(_column_steps(a, op, b, extra=2)):
        g = claimed[col] if col < len(claimed) else "_"
        same = g == str(digit) or (g == "_" and digit == 0)  # a leading zero may be absent
        matched = matched and same
        lines.append(
            f"{g} {x}{op}{y}{op}{carry}={digit} {g}{_mark(same)} {flag}{out} {_mark(matched)}"
        )
    expected = str(a + b if op == "+" else a - b)
    return "\n".join(lines + [f"{VERDICT_PREFIX}{int(verify(response, expected))}"])


def _mark(agrees: bool) -> str:
    return "=" if agrees else "!"


def trailing_digits(response: str) -> str:
    """The digits the stripped response ends with: what the judge reads as the claimed answer."""
    text = response.strip()
    stem = text.rstrip("0123456789")
    return text[len(stem) :]


def to_rows(problems: list[Problem]) -> list[dict[str, Any]]:
    """DAPO-Math-shaped rows (the shape of BytedTsinghua-SIA/DAPO-Math-17k):
    ``{"data_source", "prompt": [{"role": "user", "content": <policy prompt>}], "ability",
    "reward_model": {"style": "rule", "ground_truth": <answer>}, "extra_info": {"index", "digits"}}``.
    The tiny tokenizer has no chat template: use the single user message's content verbatim."""
    return [
        {
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": policy_prompt(p)}],
            "ability": "arithmetic",
            "reward_model": {"style": "rule", "ground_truth": p.answer},
            "extra_info": {"index": p.id, "digits": p.digits, "question": p.question},
        }
        for p in problems
    ]
