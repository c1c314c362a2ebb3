"""Rewards: the verifiable answer check (DAPO-Math style) and the GenRM judge's verdict.

Verifiable: `verify(response, ground_truth)` is 1.0 when the response's final answer equals
the ground truth, else 0.0. The final answer is whichever comes last in the response: an
`Answer: ...` line (rest of that line; markdown bold around it as in `**Answer:** 7` or
`**Answer: 7**` is dropped) or a `\\boxed{...}` (braces balanced). A ground truth written as
`\\boxed{42}` counts as its content. Both sides are normalised: `$` and `\\$`, `\\text{}`/
`\\mathrm{}`, `\\left`/`\\right`, LaTeX spaces (`\\,` `\\!` `\\ ` `~`), spaces and a trailing
period are dropped; `\\sqrt2` reads as `\\sqrt{2}`; `1,000`, `1{,}000` and `1\\,000` are 1000 but
`1,2,3` stays a list; a leading single-letter variable is dropped (`x = 5` -> `5`, not
`x = 5, y = 6`); a degree mark after a number is dropped (`10^\\circ`, `10^{\\circ}`, `10°`).
Numbers compare exactly as rationals, so "0.5", "1/2", "\\frac{1}{2}", "\\dfrac12", "+0.50" all
match; anything else compares as the normalised string. Against a ground truth that is a plain
number, a trailing unit may follow the answer: text in `\\text{}`/`\\mathrm{}` (`5\\text{ cm}`),
known unit words (`UNIT_WORDS`: `10 degrees`, `12 square units`, `5 cm^2`) or `%`; the number
must still be equal (`5 cm` vs 50 is wrong), and other trailing words (`5 pi`, `5 x`) are not
units; answers over 100 characters are not unit-stripped. A percentage is not rescaled (`50%`
matches 50, not 0.5).

GenRM: `judge_prompt` fills a template with `{question}` and `{response}` (the run's, given:
`pivot.tiny.task.judge_template` falls back to the tiny GenRM's). `parse_verdict(text)` reads
the LAST verdict in the judge's text after its thinking block (`<think>...</think>`; none while the
block is unclosed) and returns a score in [0, 1] or None. Accepted (case-insensitive, after
`Verdict:` or `Score:`): a number in [0, 1] ("1", "0.75"), a fraction or "x/10" form ("7/10" ->
0.7), a percentage ("75%"), or a word (correct/yes/true/pass -> 1, incorrect/wrong/no/false/
fail -> 0). Out-of-range numbers are unparsable. `GenRMScorer` maps unparsable verdicts to a
fallback score and counts them. Total reward: R = w_v * R_verifiable + w_g * R_GenRM. Weights,
fallback and template come from `pivot.config.RewardConfig`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from pivot.config import RewardConfig

_ANSWER_LINE = re.compile(r"answer\s*:\s*([^\n]*)", re.IGNORECASE)
_VERDICT = re.compile(
    r"(?:verdict|score)\s*[:=]\s*\**\s*([-+]?\d+(?:\.\d+)?(?:\s*/\s*\d+(?:\.\d+)?)?\s*%?|[a-z]+)",
    re.IGNORECASE,
)
# one line per score (kept by fmt: skip): the table reads as a table
_WORDS = {
    "correct": 1.0, "yes": 1.0, "true": 1.0, "pass": 1.0, "right": 1.0,
    "incorrect": 0.0, "wrong": 0.0, "no": 0.0, "false": 0.0, "fail": 0.0,
}  # fmt: skip
_FRAC = re.compile(r"^([+-]?)\\[dt]?frac(?:\{([^{}]+)\}|(\d))(?:\{([^{}]+)\}|(\d))$")
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)$")
_NUMBER_FORM = re.compile(r"^-?\d+(/\d+)?$")  # what normalize_answer makes of a number
UNIT_WORDS = frozenset(
    "degree deg radian rad cm mm km meter metre centimeter centimetre millimeter millimetre kilometer kilometre "
    "inch in foot feet ft yard yd mile sq square cubic unit dollar cent euro pound lb ounce oz gram kg mg "
    "liter litre ml gallon second sec minute min hour hr day week month year mph kph percent "
    "people person student way time point".split()
)
"""Plain words `verify` drops after a numeric answer (with an optional plural s/es)."""
_UNIT_TAIL = re.compile(
    r"(?:\\(?:text|textrm|mathrm|mbox)\s*\{[\s~]*[A-Za-z][A-Za-z.\s~]*\}"  # \text{ cm}
    r"|(?<![A-Za-z\\])(?P<words>[A-Za-z]+(?:\s+[A-Za-z]+){0,2})"  # cm, square units
    r"|\\?%)"
    r"(?:\s*\^\s*\{?\s*[23]\s*\}?)?[\s.$~]*$"  # cm^2, then a closing $ or period
)


def _last_boxed(text: str) -> tuple[int, str] | None:
    """(position, content) of the last \\boxed{...} / \\fbox{...}, braces balanced."""
    best = None
    for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text):
        depth, i = 1, m.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            best = (m.start(), text[m.end() : i - 1])
    return best


def extract_answer(response: str) -> str | None:
    """The response's final answer text (not yet normalised), or None if it states none."""
    boxed = _last_boxed(response)
    lines = list(_ANSWER_LINE.finditer(response))
    line = (
        (lines[-1].start(), lines[-1].group(1).strip().strip("*").strip()) if lines else None
    )  # **Answer:** 7
    found = [c for c in (boxed, line) if c is not None]
    if not found:
        return None
    text = max(found, key=lambda c: c[0])[1]
    inner = _last_boxed(text)  # "Answer: \boxed{5}"
    return inner[1] if inner else text


def normalize_answer(text: str) -> str:
    """Canonical string form: a reduced rational ("3/4", "-2") for numbers, else cleaned text."""
    s = re.sub(r"\\(?:text|textrm|mathrm|mbox|textbf|mathbf)\{([^{}]*)\}", r"\1", text)
    s = re.sub(
        r"\\sqrt\s*([0-9A-Za-z])", r"\\sqrt{\1}", s
    )  # \sqrt2 is \sqrt{2}; \sqrt23 is \sqrt{2}3
    for latex_space in ("\\left", "\\right", "\\!", "\\,", "\\;", "\\:", "\\ ", "~"):
        s = s.replace(latex_space, "")
    s = s.replace("{,}", ",").replace("\\$", "").replace("$", "").replace("\\%", "%")
    s = re.sub(r"\s+", "", s).rstrip(".")
    assigned = re.fullmatch(r"[A-Za-z]=([^=]+)", s)  # "x=5": the value of a single variable
    if assigned:
        s = assigned.group(1)
    degrees = re.fullmatch(r"(.+?)(?:\^\{?\\circ\}?|\^\{?°\}?|°|\\degree)", s)
    if degrees and _as_rational(_drop_thousands(degrees.group(1))) is not None:
        s = degrees.group(1)
    s = _drop_thousands(s)
    value = _as_rational(s)
    if value is None:
        return s.lower()
    return str(value)


def _drop_thousands(s: str) -> str:
    """ "1,000" -> "1000"; "1,2,3" (a list) stays as it is."""
    return s.replace(",", "") if re.fullmatch(r"[+-]?\d{1,3}(,\d{3})+(\.\d+)?", s) else s


def strip_unit(text: str) -> str | None:
    """`text` without a trailing unit ("5 cm", "5\\text{ cm}", "5 square units", "50\\%"), or None
    if it ends in none. Plain words must all be known units (`UNIT_WORDS`, plurals too), so
    "5 pi" or "5 x" keep their meaning; text in \\text{}/\\mathrm{} is a unit whatever it says."""
    if len(text) > 100:  # a number with a unit is short; this also bounds the regex's backtracking
        return None
    m = _UNIT_TAIL.search(text)
    if m is None:
        return None
    words = m.group("words")
    if words and not all(_is_unit_word(w) for w in words.split()):
        return None
    return text[: m.start()]


def _is_unit_word(word: str) -> bool:
    w = word.lower()
    return (
        w in UNIT_WORDS
        or (w.endswith("s") and w[:-1] in UNIT_WORDS)
        or (w.endswith("es") and w[:-2] in UNIT_WORDS)
    )


def _as_rational(s: str) -> Fraction | None:
    """Exact value of "3", "-0.5", "1/2", "\\frac{1}{2}", "\\dfrac12"; None if not a number."""
    if _NUMBER.match(s):
        return Fraction(s)
    m = _FRAC.match(s)
    if m:
        sign, num, den = m.group(1), m.group(2) or m.group(3), m.group(4) or m.group(5)
    else:
        parts = s.split("/")
        if len(parts) != 2:
            return None
        sign, num, den = "", parts[0], parts[1]
    if not (_NUMBER.match(num) and _NUMBER.match(den)) or Fraction(den) == 0:
        return None
    value = Fraction(num) / Fraction(den)
    return -value if sign == "-" else value


def verify(response: str, ground_truth: str) -> float:
    """1.0 if the response's final answer equals `ground_truth` (see the module docstring), else 0.0."""
    answer = extract_answer(response)
    if answer is None:
        return 0.0
    truth = str(ground_truth)
    boxed = _last_boxed(truth)
    want = normalize_answer(boxed[1] if boxed else truth)
    if normalize_answer(answer) == want:
        return 1.0
    without_unit = strip_unit(answer) if _NUMBER_FORM.match(want) else None
    return 1.0 if without_unit is not None and normalize_answer(without_unit) == want else 0.0


def judge_prompt(question: str, response: str, template: str) -> str:
    """The GenRM's input: `template` with `{question}` and `{response}` filled in."""
    for field in ("{question}", "{response}"):
        if field not in template:
            start = template[:60] + ("..." if len(template) > 60 else "")
            raise ValueError(
                f"judge template must contain {field} (it has {len(template)} characters, "
                f"starting {start!r})"
            )
    return template.replace("{question}", question.strip()).replace("{response}", response.strip())


def _verdict_value(token: str) -> float | None:
    t = token.strip().lower().replace(" ", "")
    if t in _WORDS:
        return _WORDS[t]
    try:
        if t.endswith("%"):
            value = float(t[:-1]) / 100.0
        elif "/" in t:
            num, den = t.split("/")
            value = float(num) / float(den)
        else:
            value = float(t)
    except (ValueError, ZeroDivisionError):
        return None
    return value if 0.0 <= value <= 1.0 else None


def after_thinking(text: str) -> str | None:
    """What a reasoning judge says after its thinking block: the text after the last `</think>`;
    None when a `<think>` block never closes (it ran out of tokens while thinking), so a verdict
    it only considered is not taken for its answer. Text without think tags is returned whole."""
    close = text.rfind("</think>")
    if close >= 0:
        return text[close + len("</think>") :]
    return None if "<think>" in text else text


def parse_verdict(text: str) -> float | None:
    """The judge's score in [0, 1] from its last `Verdict:`/`Score:` after any thinking block
    (formats in the module doc)."""
    answer = after_thinking(text)
    if answer is None:
        return None
    matches = list(_VERDICT.finditer(answer))
    if not matches:
        return None
    return _verdict_value(matches[-1].group(1))


@dataclass
class RewardStats:
    verdicts: int = 0
    unparsable_verdicts: int = 0
    verdict_retries: int = 0
    judge_timeouts: int = 0


class GenRMScorer:
    """Turns judge outputs into scores, applying the fallback and counting unparsable ones.
    `config` is `pivot.config.RewardConfig` (judge_template, fallback_score, w_verifiable, w_genrm)."""

    def __init__(self, config: RewardConfig) -> None:
        judge_prompt(
            "q", "r", config.judge_template
        )  # a bad template fails here, naming the placeholder
        self.config = config
        self.stats = RewardStats()

    def prompt(self, question: str, response: str) -> str:
        return judge_prompt(question, response, self.config.judge_template)

    def timed_out(self) -> float:
        """The score of a judging stopped by its time budget: the fallback, counted."""
        self.stats.judge_timeouts += 1
        return self.config.fallback_score

    def score(self, judge_text: str) -> float:
        self.stats.verdicts += 1
        value = parse_verdict(judge_text)
        if value is None:
            self.stats.unparsable_verdicts += 1
            return self.config.fallback_score
        return value


def total_reward(r_verifiable: float, r_genrm: float | None, config: RewardConfig) -> float:
    """R = w_v * R_v + w_g * R_g; `r_genrm=None` (no judge in this run) counts as 0."""
    return config.w_verifiable * r_verifiable + config.w_genrm * (r_genrm or 0.0)
