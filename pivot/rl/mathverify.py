"""`--reward.verifier math_verify`: Hugging Face's math-verify package as the answer check.

Called the way veRL's own math-verify scorer calls it (`verl/utils/reward_score/math_verify.py`,
`compute_score`): the ground truth is wrapped in `\\boxed{}` and parsed as LaTeX; the response is
parsed for both a plain expression and LaTeX (math-verify takes the last answer it finds:
`\\boxed{}`, "final answer is", a trailing number...); the two are compared symbolically. 1.0 if
they agree, else 0.0; a ground truth already written as `\\boxed{x}` counts as x.

Timeouts: math-verify's own timeout is `signal.alarm`, which works only on the main thread
(`math_verify/grader.py`, the "doesn't support threaded environment" error) and Pivot scores on
rank 0's controller thread, so it runs with its timeouts off; instead the response is cut to its
last `TAIL_CHARS` characters (the final answer is at the end) to bound the parsing work.

It is not the default: DAPO's recipe defines its reward by its own rule (veRL routes data_source
"math_dapo" to `verl/utils/reward_score/math_dapo.py`: the last "Answer:" line, normalised, compared
as a string), which `pivot.rl.reward.verify` follows; `tests/rl/test_math_verify.py` lists where
the two agree and differ.
"""

from __future__ import annotations

import logging
from typing import Any

TAIL_CHARS = 2000
PACKAGE = "math-verify==0.9.0"  # as pinned in requirements.txt

_parts: tuple[Any, ...] | None = None


def _math_verify() -> tuple[Any, ...]:
    """(parse, verify, gold config, prediction config), imported once (sympy is slow to import)."""
    global _parts
    if _parts is None:
        from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

        # its "timeout is disabled" warning is about the choice documented above, said once per run
        logging.getLogger("math_verify").setLevel(logging.ERROR)
        _parts = (
            parse,
            verify,
            (LatexExtractionConfig(),),
            (ExprExtractionConfig(), LatexExtractionConfig()),
        )
    return _parts


def available() -> str | None:
    """None when math-verify imports, else why not (one line)."""
    try:
        _math_verify()
    except ImportError as e:
        return f"reward.verifier=math_verify needs the math-verify package ({e}); pip install {PACKAGE}"
    return None


def math_verify(response: str, ground_truth: str) -> float:
    """1.0 if math-verify finds the response's final answer equal to `ground_truth`, else 0.0."""
    parse, verify, gold_config, pred_config = _math_verify()
    truth = str(ground_truth).strip()
    if not (truth.startswith("\\boxed{") and truth.endswith("}")):
        truth = "\\boxed{" + truth + "}"
    gold = parse(truth, extraction_config=gold_config, parsing_timeout=None)
    pred = parse(response[-TAIL_CHARS:], extraction_config=pred_config, parsing_timeout=None)
    return 1.0 if gold and pred and verify(gold, pred, timeout_seconds=None) else 0.0
