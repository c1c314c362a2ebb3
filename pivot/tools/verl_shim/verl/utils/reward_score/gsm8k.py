"""Pivot's stand-in for the veRL module `verl.utils.reward_score.gsm8k`, used only when veRL
itself does not import (`pivot.tools.verl_compat`); veRL's gsm8k tool scores with it.

The contract, as veRL documents and behaves (0.6.1 and 0.9.1), written for Pivot:
`compute_score(solution_str, ground_truth, method, format_score, score)` reads an answer from the
end of the solution (its last 300 characters, so a long reasoning cannot make the search slow):
- "strict": the last number written after "#### " (GSM8K's answer line), with its ","
  removed, so "#### 1,000" answers "1000";
- "flexible": the last run of digits, "-", "." and "," anywhere, taken as written (a run that is
  only "." is skipped).
No answer scores 0; an answer equal to `ground_truth` (as strings) scores `score`; any other
answer scores `format_score` (it was at least written in the expected form).
"""

from __future__ import annotations

import re

TAIL_CHARS = 300
"""How much of the solution's end is searched for the answer."""
_STRICT = re.compile(r"#### (-?[0-9.,]+)")
_NUMBER = re.compile(r"-?[0-9.,]+")


def extract_solution(solution_str: str, method: str = "strict") -> str | None:
    """The answer `method` reads from the end of `solution_str`, or None when there is none."""
    if method not in ("strict", "flexible"):
        raise ValueError(f"method={method!r}: expected 'strict' or 'flexible'")
    tail = solution_str[-TAIL_CHARS:]
    if method == "strict":
        found = _STRICT.findall(tail)
        return found[-1].replace(",", "") if found else None
    runs = _NUMBER.findall(tail)
    if not runs:
        return None
    numbers = [r for r in runs if r != "."]
    # every run a lone ".": the first run stands (veRL's scan ends on it), so the answer is
    # wrong rather than absent and scores format_score
    return numbers[-1] if numbers else runs[0]


def compute_score(
    solution_str: str,
    ground_truth: str,
    method: str = "strict",
    format_score: float = 0.0,
    score: float = 1.0,
) -> float:
    """`score` when the answer `method` reads equals `ground_truth`, `format_score` when it
    differs, 0 when there is none (the module docstring has the rules)."""
    answer = extract_solution(solution_str, method=method)
    if answer is None:
        return 0
    return score if answer == ground_truth else format_score
