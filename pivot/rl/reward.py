"""Rewards: the verifiable answer check (DAPO-Math style) and the GenRM judge's verdict.

Verifiable: `verify(response, ground_truth)` is 1.0 when the response's final answer equals
the ground truth, else 0.0. The final answer is whichever comes last in the response: an
`Answer: ...` line (rest of that line) or a `\\boxed{...}` (braces balanced). Both sides are
normalised: `$`, `\\text{}`/`\\mathrm{}`, `\\left`/`\\right`, spaces, thousands commas and a trailing
period are dropped; numbers compare exactly as rationals, so "0.5", "1/2", "\\frac{1}{2}",
"\\dfrac12", "+0.50" all match; anything else compares as the normalised string.

GenRM: `judge_prompt` fills a template with `{question}` and `{response}` (default
`pivot.tiny.synthetic.JUDGE_TEMPLATE`). `parse_verdict(text)` reads the LAST verdict in the
judge's text and returns a score in [0, 1] or None. Accepted (case-insensitive, after
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
_WORDS = {
    "correct": 1.0, "yes": 1.0, "true": 1.0, "pass": 1.0, "right": 1.0,
    "incorrect": 0.0, "wrong": 0.0, "no": 0.0, "false": 0.0, "fail": 0.0,
}  # fmt: skip
_FRAC = re.compile(r"^([+-]?)\\[dt]?frac(?:\{([^{}]+)\}|(\d))(?:\{([^{}]+)\}|(\d))$")
_NUMBER = re.compile(r"^[+-]?(\d+(\.\d*)?|\.\d+)$")


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
    line = (lines[-1].start(), lines[-1].group(1)) if lines else None
    found = [c for c in (boxed, line) if c is not None]
    if not found:
        return None
    text = max(found, key=lambda c: c[0])[1]
    inner = _last_boxed(text)  # "Answer: \boxed{5}"
    return inner[1] if inner else text


def normalize_answer(text: str) -> str:
    """Canonical string form: a reduced rational ("3/4", "-2") for numbers, else cleaned text."""
    s = text.strip()
    s = re.sub(r"\\(?:text|mathrm|textbf|mathbf)\{([^{}]*)\}", r"\1", s)
    s = s.replace("\\left", "").replace("\\right", "").replace("\\!", "").replace("\\,", "")
    s = s.replace("$", "").replace(" ", "").replace("\t", "")
    s = s.rstrip(".")
    if re.fullmatch(r"[+-]?\d{1,3}(,\d{3})+(\.\d+)?", s):
        s = s.replace(",", "")
    value = _as_rational(s)
    if value is None:
        return s.lower()
    return str(value)


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
    """1.0 if the response's final answer equals `ground_truth` after normalisation, else 0.0."""
    answer = extract_answer(response)
    if answer is None:
        return 0.0
    return 1.0 if normalize_answer(answer) == normalize_answer(str(ground_truth)) else 0.0


def _default_template() -> str:
    from pivot.tiny.synthetic import JUDGE_TEMPLATE  # lazy: keeps this module import-light

    return JUDGE_TEMPLATE


def judge_prompt(question: str, response: str, template: str | None = None) -> str:
    """The GenRM's input: `template` with `{question}` and `{response}` filled in (None or ""
    = the synthetic task's template)."""
    template = template or _default_template()
    for field in ("{question}", "{response}"):
        if field not in template:
            raise ValueError(f"judge template must contain {field}: {template!r}")
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


def parse_verdict(text: str) -> float | None:
    """The judge's score in [0, 1] from its last `Verdict:`/`Score:` (formats in the module doc)."""
    matches = list(_VERDICT.finditer(text))
    if not matches:
        return None
    return _verdict_value(matches[-1].group(1))


@dataclass
class RewardStats:
    verdicts: int = 0
    unparsable_verdicts: int = 0


class GenRMScorer:
    """Turns judge outputs into scores, applying the fallback and counting unparsable ones.
    `config` is `pivot.config.RewardConfig` (judge_template, fallback_score, w_verifiable, w_genrm)."""

    def __init__(self, config: RewardConfig) -> None:
        judge_prompt("q", "r", config.judge_template)  # a bad template fails here, naming the placeholder
        self.config = config
        self.stats = RewardStats()

    def prompt(self, question: str, response: str) -> str:
        return judge_prompt(question, response, self.config.judge_template)

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
