"""`verify` on the answer forms a DAPO-Math user meets: right answers match, wrong ones stay wrong."""

from __future__ import annotations

import pytest

from pivot.rl.reward import strip_unit, verify

RIGHT = [
    ("Answer: x = 5", "5"),
    ("Answer: $x = 5$", "5"),
    ("Answer: n=12", "12"),
    ("Answer: x = \\frac{1}{2}", "0.5"),
    ("Answer: x=5", "x = 5"),
    ("**Answer:** 7", "7"),
    ("**Answer: 7**", "7"),
    ("Answer: **7**", "7"),
    ("**Answer:** \\boxed{7}", "7"),
    ("Answer: \\$5", "5"),
    ("Answer: $\\$5.00$", "5"),
    ("\\boxed{\\$5}", "5"),
    ("Answer: 10 degrees", "10"),
    ("Answer: $10^\\circ$", "10"),
    ("Answer: 10^{\\circ}", "10"),
    ("Answer: 10°", "10"),
    ("Answer: 10 degrees", "10^\\circ"),
    ("Answer: 30", "30^\\circ"),
    ("Answer: $5\\text{ cm}$", "5"),
    ("Answer: 5 \\text{cm}", "5"),
    ("Answer: 5\\ \\text{cm}", "5"),
    ("Answer: 5 cm", "5"),
    ("Answer: $5$ cm.", "5"),
    ("Answer: 5 \\text{cm}^2.", "5"),
    ("Answer: 5 cm^2", "5"),
    ("Answer: 12 square units", "12"),
    ("Answer: 4 inches", "4"),
    ("Answer: 3 ways", "3"),
    ("Answer: x = 5 cm", "5"),
    ("Answer: \\frac{1}{2} \\mathrm{~m}", "1/2"),
    ("\\boxed{5 \\text{ cm}}", "5"),
    ("Answer: 50\\%", "50"),
    ("Answer: 50%", "50"),
    ("Answer: 1,000,000 dollars", "1000000"),
    ("Answer: \\sqrt2", "\\sqrt{2}"),
    ("Answer: \\sqrt{2}", "\\sqrt2"),
    ("Answer: 2\\sqrt 3", "2\\sqrt{3}"),
    ("Answer: 1{,}000", "1000"),
    ("Answer: 1\\,000", "1000"),
    ("Answer: 10{,}000{,}000", "10000000"),
    ("Answer: 42", "\\boxed{42}"),
    ("\\boxed{42}", "$\\boxed{42}$"),
    ("Answer: 5\\text{ cm}", "5\\text{ cm}"),  # a truth with a unit still matches itself
]

WRONG = [
    ("Answer: 6", "5"),
    ("Answer: x = 6", "5"),
    ("Answer: x = 5, y = 6", "5"),
    ("Answer: x = y = 5", "5"),
    ("Answer: xy = 5", "5"),  # only a single-letter variable is dropped
    ("Answer: x < 5", "5"),
    ("Answer: x \\le 5", "5"),
    ("Answer: 5 cm", "50"),
    ("Answer: 5\\text{ cm}", "50"),
    ("Answer: 5 \\text{cm}", "\\boxed{6}"),
    ("Answer: 5 cm", "5 m"),  # units are dropped only against a plain number
    ("Answer: 5 cm", "cm"),
    ("Answer: \\sqrt{3}", "\\sqrt{2}"),
    ("Answer: \\sqrt23", "\\sqrt{23}"),  # LaTeX: \sqrt23 is \sqrt{2}3
    ("Answer: 1,2,3", "123"),
    ("Answer: 1,2,3", "1"),
    ("Answer: 5, 6", "5"),
    ("Answer: 5 and 6", "5"),
    ("Answer: 5 \\text{ or } 6", "5"),
    ("Answer: 5 pi", "5"),  # not a unit word
    ("Answer: 5\\pi", "5"),
    ("Answer: 5x", "5"),
    ("Answer: 5 x", "5"),
    ("Answer: 5i", "5"),
    ("Answer: 5e", "5"),
    ("Answer: 5 m", "5"),  # single letters are too ambiguous without \text{}
    ("Answer: 5 apples", "5"),
    ("Answer: 5^2", "5"),
    ("Answer: -5", "5"),
    ("Answer: \\$50", "5"),
    ("Answer: 10^\\circ", "100"),
    ("Answer: 50\\%", "0.5"),  # a percentage is not rescaled
    ("Answer: 5 cm per second", "5"),
]


@pytest.mark.parametrize(("response", "truth"), RIGHT)
def test_right_answer_forms_match(response: str, truth: str) -> None:
    assert verify(response, truth) == 1.0


@pytest.mark.parametrize(("response", "truth"), WRONG)
def test_wrong_answers_stay_wrong(response: str, truth: str) -> None:
    assert verify(response, truth) == 0.0


def test_strip_unit() -> None:
    assert strip_unit("5 square units") == "5 "
    assert strip_unit("5\\text{ cm}^2") == "5"
    assert strip_unit("5 pi") is None and strip_unit("5") is None
    assert strip_unit("1 " + "a " * 60 + "cm") is None  # long text is not an answer with a unit
