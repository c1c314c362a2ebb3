"""What a user plugs into the reward: their own answer check and a judge template from a file.

`--reward.verifier module:function` (an importable module) or `path/to/file.py:function` names a
function; `--reward.verifier math_verify` is Hugging Face's math-verify (`pivot.rl.mathverify`);
empty is the built-in DAPO rule (`pivot.rl.reward.verify`). Two calling conventions, told apart
by the function's parameters:

- Pivot's: `function(response, ground_truth)`.
- veRL's (`docs/preparation/reward_function.rst`; `default_compute_score` in
  `verl/utils/reward_score/__init__.py`): `compute_score(data_source, solution_str, ground_truth,
  extra_info=None)`, chosen when the function names `solution_str` or `data_source` (or takes
  only `**kwargs`). It is called with keywords, as veRL's `NaiveRewardManager` does
  (`verl/workers/reward_manager/naive.py`): the row's `data_source` ("" when the row has none),
  the response, the ground truth, and a copy of the row's `extra_info` ({} when none).

The result is the verifiable reward: a number (or bool), or a dict whose `"score"` is the reward
(naive.py reads `score["score"]`) and whose other keys are logged: numeric ones as per-step
means `reward_extra/<key>` in metrics.jsonl/TensorBoard, all of them in the sample's
`reward_extra` in samples.jsonl. The function and its convention are resolved at start-up,
before any process group exists, and a bad reference fails there in one line. A verifier that
raises or returns a non-number (or a dict without "score") on some sample scores that sample
0.0 and is counted (`count/verifier_errors`); the run goes on.
"""

from __future__ import annotations

import copy
import importlib
import importlib.util
import inspect
import math
import numbers
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pivot.config import ConfigError, RewardConfig
from pivot.rl.data import Prompt
from pivot.rl.reward import verify

Verifier = Callable[..., Any]
Style = Literal["pivot", "verl"]
VERL_PARAMS = ("data_source", "solution_str", "ground_truth", "extra_info")
"""The keywords veRL's reward managers call `compute_score` with (naive.py)."""
BUILTIN = {"math_verify": "pivot.rl.mathverify:math_verify"}
"""Built-in verifiers by name (the empty name is `pivot.rl.reward.verify`)."""


def load_verifier(spec: str) -> Verifier:
    """The function named by `spec` (see the module docstring); empty = the built-in check."""
    if not spec:
        return verify
    if spec in BUILTIN:
        from pivot.rl.mathverify import available

        missing = available()
        if missing:
            raise ConfigError(missing)
        spec = BUILTIN[spec]
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        raise ConfigError(
            f"reward.verifier={spec!r}: expected module:function or path/to/file.py:function"
        )
    try:
        module = _import(where)
    except ConfigError:
        raise
    except Exception as e:  # the user's module failed while importing
        raise ConfigError(
            f"reward.verifier={spec!r}: importing {where} failed: {type(e).__name__}: {e}"
        ) from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ConfigError(f"reward.verifier={spec!r}: {where} has no function {name!r}")
    try:
        calling_style(fn)
    except TypeError as e:
        raise ConfigError(f"reward.verifier={spec!r}: {name} {e}") from None
    return fn


def calling_style(fn: Verifier) -> Style:
    """ "verl" when `fn` names veRL's parameters (or takes only keywords), "pivot" when it takes
    (response, ground_truth); TypeError saying what it must accept otherwise."""
    try:
        sig = inspect.signature(fn)
    except ValueError:  # builtins without a signature: trust them with Pivot's convention
        return "pivot"
    names = set(sig.parameters)
    verl_kw = _binds(sig, **{p: p for p in VERL_PARAMS})
    if names & {"solution_str", "data_source"}:
        if not verl_kw:
            raise TypeError(
                "names veRL's parameters but cannot be called as "
                "compute_score(data_source=, solution_str=, ground_truth=, extra_info=)"
            )
        return "verl"
    if _binds(sig, "response", "ground truth"):
        return "pivot"
    if verl_kw:
        return "verl"
    raise TypeError(
        "must accept (response, ground_truth) or veRL's (data_source, solution_str, ground_truth, extra_info=None)"
    )


def _binds(sig: inspect.Signature, *args: str, **kwargs: str) -> bool:
    try:
        sig.bind(*args, **kwargs)
    except TypeError:
        return False
    return True


def _import(where: str) -> object:
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise ConfigError(f"reward.verifier: no such file {where}")
        spec = importlib.util.spec_from_file_location(f"pivot_user_verifier_{path.stem}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    try:
        return importlib.import_module(where)
    except ModuleNotFoundError as e:
        if e.name and where.startswith(e.name):
            raise ConfigError(
                f"reward.verifier: no module named {where!r} (is it on PYTHONPATH?)"
            ) from None
        raise


def judge_template(config: RewardConfig) -> str:
    """The configured judge template: --reward.judge-template, the text of
    --reward.judge-template-file, or "" when neither is given (`pivot.tiny.task.judge_template`
    then gives the tiny task's)."""
    if not config.judge_template_file:
        return config.judge_template
    path = Path(config.judge_template_file)
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(
            f"reward.judge_template_file={str(path)!r}: cannot read it ({type(e).__name__}: {e})"
        ) from None


@dataclass(frozen=True)
class Score:
    """A verifier's result: the verifiable reward and, from a dict result, its other keys (plain
    JSON values: numbers, strings, None; anything else as its str)."""

    value: float
    extras: dict[str, Any] = field(default_factory=dict)

    @property
    def accuracy(self) -> float:
        """What accuracy figures count: a numeric `acc` extra when the verifier gives one (veRL's
        validation takes "acc" over the reward: `_val_metrics_update` in ray_trainer.py), else the
        reward (so math_dapo's -1/+1 rule, which gives `acc`, reports accuracy in [0, 1])."""
        return accuracy(self.value, self.extras)


def accuracy(value: float, extras: dict[str, Any]) -> float:
    acc = extras.get("acc")
    return float(acc) if isinstance(acc, (bool, int, float)) else value


@dataclass
class CheckedVerifier:
    """A verifier that never stops the run: errors and non-numbers score 0.0 and are counted."""

    fn: Verifier
    errors: int = 0
    first_error: str = ""

    def __post_init__(self) -> None:
        self.style: Style = calling_style(self.fn)

    def __call__(self, response: str, ground_truth: str) -> float:
        """The reward alone, for a response to a row with no data_source or extra_info."""
        return self.check(response, Prompt(-1, "", ground_truth)).value

    def check(self, response: str, prompt: Prompt) -> Score:
        try:
            if self.style == "verl":
                result = self.fn(
                    data_source=prompt.data_source,
                    solution_str=response,
                    ground_truth=prompt.ground_truth,
                    extra_info=copy.deepcopy(prompt.extra_info) if prompt.extra_info else {},
                )
            else:
                result = self.fn(response, prompt.ground_truth)
            return _score(result)
        except Exception as e:
            self.errors += 1
            if not self.first_error:
                self.first_error = f"{type(e).__name__}: {e}"
                print(
                    f"pivot: the verifier failed on a sample (scored 0.0, counted): {self.first_error}",
                    flush=True,
                )
            return Score(0.0)


def _score(result: Any) -> Score:
    extras: dict[str, Any] = {}
    if isinstance(result, dict):
        if "score" not in result:
            raise ValueError(f"returned a dict without 'score' (keys {sorted(map(str, result))})")
        extras = {str(k): _plain(v) for k, v in result.items() if k != "score"}
        result = result["score"]
    value = float(result)
    if not math.isfinite(value):
        raise ValueError(f"returned {value}")
    return Score(value, extras)


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):  # numpy and torch scalars too
        return int(value)
    if isinstance(value, numbers.Real):
        number = float(value)
        return number if math.isfinite(number) else None
    return str(value)


def extra_means(extras: list[dict[str, Any]]) -> dict[str, float]:
    """`reward_extra/<key>`: the mean of each numeric extra key over the samples that gave it."""
    sums: dict[str, list[float]] = {}
    for row in extras:
        for key, value in row.items():
            if isinstance(value, (bool, float, int)):
                sums.setdefault(key, []).append(float(value))
    return {
        f"reward_extra/{key}": sum(values) / len(values) for key, values in sorted(sums.items())
    }


def check_plugins(config: RewardConfig) -> None:
    """Start-up check of the verifier and the judge template; raises ConfigError in one line."""
    from pivot.rl.reward import judge_prompt

    load_verifier(config.verifier)
    template = judge_template(config)
    if template:
        try:
            judge_prompt("q", "r", template)
        except ValueError as e:
            field = (
                f"reward.judge_template_file {config.judge_template_file}"
                if config.judge_template_file
                else "reward.judge_template"
            )
            raise ConfigError(f"{field}: {e}") from None
