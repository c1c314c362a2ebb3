"""Pivot's stand-in for the veRL module `verl.utils.rollout_trace`, used only when veRL itself
does not import (`pivot.tools.verl_compat`).

veRL's `rollout_trace_op` sends a method's inputs and outputs to a tracing backend (weave or
mlflow) when one is configured and otherwise just awaits the method. Pivot records tool calls
itself (the runner's stats, the episode's samples), so here the decorator is the method itself:
an `async def` stays a coroutine function, which is what the runner checks to await it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def rollout_trace_op(func: F) -> F:
    """Trace nothing: return `func` unchanged (sync or async)."""
    return func


@contextlib.contextmanager
def rollout_trace_attr(*args: Any, **kwargs: Any) -> Iterator[None]:
    """veRL's context manager that tags a trace with the sample's attributes; tags nothing."""
    yield
