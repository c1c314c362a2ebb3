"""`--reward.verifier math_verify` (Hugging Face's math-verify 0.9.0) against Pivot's DAPO rule
(`pivot.rl.reward.verify`) on the answer forms a math RL user meets. Each row states both
verdicts, so the table is the record of where they agree and where they differ, and why.

In short: they agree on integers, negatives, decimals against fractions, `\\boxed{}`, `$...$`
LaTeX after "Answer:", thousands commas, common units and degrees. math-verify is symbolic on
LaTeX (`2\\sqrt{3}` = `\\sqrt{12}`, `(x+1)^2` = its expansion, sets and lists in any order, a
percentage as a fraction) and finds answers with no marker ("#### 72", a closing number); it
does not parse bare LaTeX after "Answer:" (`\\pi`, `\\sqrt{2}`, `(1, 2)` without `$`), and being
lenient about trailing words it reads "5 apples" as 5. Pivot's rule is DAPO's recipe's (the last
"Answer:" line or `\\boxed{}`, whichever is last; exact rational or normalised string), so it is
the default: DAPO defines its reward by that rule (veRL: `verl/utils/reward_score/math_dapo.py`).
"""

from __future__ import annotations

import threading

import pytest

from pivot.rl.mathverify import available, math_verify
from pivot.rl.plugins import load_verifier
from pivot.rl.reward import verify

# (response, ground truth, Pivot's verdict, math-verify's verdict, why they differ if they do)
CORPUS = [
    # both right
    ("Answer: 42", "42", 1, 1, ""),
    ("Answer: -3", "-3", 1, 1, ""),
    ("Answer: 0.5", "1/2", 1, 1, ""),
    ("Answer: \\frac{1}{2}", "0.5", 1, 1, ""),
    ("Answer: -\\frac{1}{2}", "-0.5", 1, 1, ""),
    ("Answer: 2/4", "1/2", 1, 1, ""),
    ("\\boxed{42}", "42", 1, 1, ""),
    ("The answer is $\\boxed{\\frac{3}{4}}$.", "\\frac34", 1, 1, ""),
    ("\\boxed{\\dfrac12}", "\\frac{1}{2}", 1, 1, ""),
    ("Answer: \\boxed{5}", "5", 1, 1, ""),
    ("\\boxed{42}", "\\boxed{42}", 1, 1, ""),
    ("Answer: $x = 5$", "5", 1, 1, ""),
    ("Answer: $\\pi$", "\\pi", 1, 1, ""),
    ("\\boxed{(1, 2)}", "(1,2)", 1, 1, ""),
    ("\\boxed{[0, 1)}", "[0,1)", 1, 1, ""),
    ("Answer: 1,000", "1000", 1, 1, ""),
    ("Answer: 5 cm", "5", 1, 1, ""),
    ("Answer: $5\\text{ cm}$", "5", 1, 1, ""),
    ("Answer: 12 square units", "12", 1, 1, ""),
    ("Answer: 10^\\circ", "10", 1, 1, ""),
    ("Answer: 50\\%", "50", 1, 1, ""),
    ("\\boxed{\\$5.00}", "5", 1, 1, ""),
    ("So the answer is 7, not 8. Answer: 8", "8", 1, 1, ""),
    ("Answer: 8\nWait, it is \\boxed{9}", "9", 1, 1, ""),
    ("\\boxed{\\infty}", "\\infty", 1, 1, ""),
    # both wrong
    ("Answer: 6", "5", 0, 0, ""),
    ("Answer: 3", "-3", 0, 0, ""),
    ("Answer: 50\\%", "0.5", 0, 0, ""),
    ("Answer: 0.333", "1/3", 0, 0, ""),
    ("Answer: 3.14", "\\pi", 0, 0, ""),
    ("Answer: 1e3", "1000", 0, 0, ""),
    ("no answer here", "5", 0, 0, ""),
    # math-verify right, Pivot wrong
    ("\\boxed{2\\sqrt{3}}", "\\sqrt{12}", 0, 1, "symbolic equality"),
    ("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\frac{1}{\\sqrt{2}}", 0, 1, "symbolic equality"),
    ("\\boxed{x^2+2x+1}", "(x+1)^2", 0, 1, "symbolic equality"),
    ("\\boxed{2\\pi}", "\\pi \\cdot 2", 0, 1, "symbolic equality"),
    ("\\boxed{\\{1, 2\\}}", "\\{2, 1\\}", 0, 1, "sets compare unordered"),
    ("\\boxed{3, 2, 1}", "1, 2, 3", 0, 1, "lists compare unordered"),
    ("\\boxed{0.5}", "50\\%", 0, 1, "a percentage is a fraction"),
    ("\\boxed{\\text{(B)}}", "B", 0, 1, "a choice letter in \\text{()}"),
    (
        "The final answer is $\\frac{3}{4}$.",
        "0.75",
        0,
        1,
        "no Answer: line or \\boxed{}: Pivot finds no answer",
    ),
    ("#### 72", "72", 0, 1, "GSM8K's marker: Pivot reads only Answer:/\\boxed{}"),
    ("The total is 72.", "72", 0, 1, "math-verify takes a closing number"),
    (
        "Answer: 5 apples",
        "5",
        0,
        1,
        "math-verify ignores trailing words; Pivot drops only known units",
    ),
    ("Answer: 5 pi", "5", 0, 1, "math-verify ignores trailing words (5 pi is not 5)"),
    # Pivot right, math-verify wrong
    ("Answer: \\pi", "\\pi", 1, 0, "bare LaTeX after Answer: (no $) is not parsed by math-verify"),
    ("Answer: \\sqrt{2}", "\\sqrt2", 1, 0, "bare LaTeX after Answer:"),
    ("Answer: \\dfrac12", "\\frac{1}{2}", 1, 0, "bare LaTeX after Answer:"),
    ("Answer: (1, 2)", "(1,2)", 1, 0, "bare tuple after Answer:"),
    ("Answer: [0, 1)", "[0,1)", 1, 0, "bare interval after Answer:"),
    ("Answer: 1{,}000", "1000", 1, 0, "LaTeX thousands separator outside $"),
    ("Answer: \\$5.00", "5", 1, 0, "escaped dollar outside $"),
    ("Answer: +7", "7", 1, 0, "a leading plus sign"),
    ("Answer: B", "\\text{B}", 1, 0, "\\text{} around the truth"),
    ("Answer: y = 2x + 1", "2x+1", 1, 0, "bare equation after Answer:"),
    (
        "\\boxed{9} ... Answer: 8",
        "8",
        1,
        0,
        "Pivot takes the last of the two; math-verify prefers \\boxed{}",
    ),
]


@pytest.fixture(scope="module", autouse=True)
def _installed() -> None:
    assert available() is None, available()  # pinned in requirements.txt: it must import, offline


@pytest.mark.parametrize(("response", "truth", "pivot", "mv", "why"), CORPUS)
def test_both_verdicts(response: str, truth: str, pivot: int, mv: int, why: str) -> None:
    assert (verify(response, truth), math_verify(response, truth)) == (pivot, mv)
    assert (pivot != mv) == bool(why)  # every difference is explained, agreement needs none


def test_the_corpus_covers_both_directions() -> None:
    agree = sum(p == m for _, _, p, m, _ in CORPUS)
    assert (
        agree >= 30
        and sum(p > m for _, _, p, m, _ in CORPUS) >= 8
        and sum(m > p for _, _, p, m, _ in CORPUS) >= 8
    )


def test_by_name_and_off_the_main_thread() -> None:
    fn = load_verifier("math_verify")
    assert fn is math_verify
    out: list[float] = []
    worker = threading.Thread(target=lambda: out.append(fn("\\boxed{2\\sqrt{3}}", "\\sqrt{12}")))
    worker.start()  # the controller scores on a background thread: signal-based timeouts would raise there
    worker.join()
    assert out == [1.0]


def test_a_long_response_is_read_from_its_tail() -> None:
    assert math_verify("x " * 50_000 + "so \\boxed{17}", "17") == 1.0
