"""What a user plugs into the reward: their own answer check and a judge template from a file.

`--reward.verifier module:function` (an importable module) or `path/to/file.py:function` names a
function called as `function(response, ground_truth)`; its result is the verifiable reward
(a float, or a bool). Both are resolved at start-up, before any process group exists, and a bad
reference fails there in one line. A verifier that raises or returns a non-number on some
sample scores that sample 0.0 and is counted (`count/verifier_errors`); the run goes on.
"""
from __future__ import annotations

import importlib
import importlib.util
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pivot.config import ConfigError, RewardConfig
from pivot.rl.reward import verify

Verifier = Callable[[str, str], float]


def load_verifier(spec: str) -> Verifier:
    """The function named by `spec` (see the module docstring); empty = the built-in check."""
    if not spec:
        return verify
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        raise ConfigError(f"reward.verifier={spec!r}: expected module:function or path/to/file.py:function")
    try:
        module = _import(where)
    except ConfigError:
        raise
    except Exception as e:  # the user's module failed while importing
        raise ConfigError(f"reward.verifier={spec!r}: importing {where} failed: {type(e).__name__}: {e}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ConfigError(f"reward.verifier={spec!r}: {where} has no function {name!r}")
    try:
        inspect.signature(fn).bind("response", "ground truth")
    except TypeError:
        raise ConfigError(f"reward.verifier={spec!r}: {name} must accept (response, ground_truth)") from None
    except ValueError:  # builtins without a signature: trust them
        pass
    return fn


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
            raise ConfigError(f"reward.verifier: no module named {where!r} (is it on PYTHONPATH?)") from None
        raise


def judge_template(config: RewardConfig) -> str:
    """The judge template: --reward.judge-template, the text of --reward.judge-template-file, or
    "" (the tiny task's)."""
    if not config.judge_template_file:
        return config.judge_template
    path = Path(config.judge_template_file)
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"reward.judge_template_file={str(path)!r}: cannot read it ({type(e).__name__}: {e})") from None


@dataclass
class CheckedVerifier:
    """A verifier that never stops the run: errors and non-numbers score 0.0 and are counted."""

    fn: Verifier
    errors: int = 0
    first_error: str = ""

    def __call__(self, response: str, ground_truth: str) -> float:
        try:
            value = float(self.fn(response, ground_truth))
            if not math.isfinite(value):
                raise ValueError(f"returned {value}")
            return value
        except Exception as e:
            self.errors += 1
            if not self.first_error:
                self.first_error = f"{type(e).__name__}: {e}"
                print(f"pivot: the verifier failed on a sample (scored 0.0, counted): {self.first_error}", flush=True)
            return 0.0


def check_plugins(config: RewardConfig) -> None:
    """Start-up check of the verifier and the judge template; raises ConfigError in one line."""
    from pivot.rl.reward import judge_prompt

    load_verifier(config.verifier)
    template = judge_template(config)
    if template:
        try:
            judge_prompt("q", "r", template)
        except ValueError as e:
            field = "reward.judge_template_file" if config.judge_template_file else "reward.judge_template"
            raise ConfigError(f"{field}: {e}") from None
