"""The measured window of a steady-state run, and the spread of a figure over seeds.

With staleness s, a deployment that overlaps steps finishes them in bursts of s + 1 (period
p = s + 1): steps 0..s are released together at the start, finish together, and release the
next s + 1 together. A rate measured over a number of steps that is not a multiple of p cuts a
burst: with s = 2, steps 3-6 of a bursty run hold one burst and a third of the next, over the
time of one burst plus its gap, and read the run slower (or faster) than it is. A window of
whole periods measures the period rate whatever its phase, because both of its edges fall on
the same point of the cycle.

`aligned_window(s)`: at least `MIN_WARMUP` steps of warm-up (start-up: the first bursts are
the longest), then the smallest whole number of periods holding at least `MIN_MEASURED`
steps. Deployments without overlap (colocated: s = 0) finish steps at a steady pace and any
length is whole periods. `window_rate` is the rate the simulator's `SimResult.throughput`
measures (tokens of the measured steps over the time from the end of the last warm-up step to
the end of the last step), as a pure function of the step ends. `Spread` is a figure over
seeds: mean, min and max.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MIN_WARMUP = 4
MIN_MEASURED = 6
DEFAULT_SEEDS = (0, 1, 2)


@dataclass(frozen=True)
class Window:
    warmup: int
    """Steps run before the measured window."""
    measured: int
    """Steps measured."""

    def __post_init__(self) -> None:
        if self.warmup < 0:
            raise ValueError(f"Window.warmup={self.warmup}: need >= 0")
        if self.measured < 1:
            raise ValueError(f"Window.measured={self.measured}: need >= 1")

    @property
    def steps(self) -> int:
        """Steps to run: warm-up plus measured."""
        return self.warmup + self.measured

    def describe(self, staleness: int | None = None) -> str:
        text = f"steps {self.warmup}..{self.steps - 1}"
        if staleness is not None:
            p = period(staleness)
            whole = self.measured % p == 0
            text += (
                f" ({self.measured // p} periods of {p})"
                if whole
                else f" (NOT whole periods of {p})"
            )
        return text


def period(staleness: int) -> int:
    """Steps per burst of a deployment with this staleness bound."""
    if staleness < 0:
        raise ValueError(f"staleness={staleness}: need >= 0")
    return staleness + 1


def aligned_window(
    staleness: int, min_warmup: int = MIN_WARMUP, min_measured: int = MIN_MEASURED
) -> Window:
    """At least `min_warmup` warm-up steps, then whole periods of at least `min_measured` steps."""
    p = period(staleness)
    return Window(min_warmup, p * math.ceil(max(min_measured, 1) / p))


def is_aligned(w: Window, staleness: int) -> bool:
    return w.measured % period(staleness) == 0


def window_rate(step_end_s: Sequence[float], step_tokens: Sequence[float], w: Window) -> float:
    """Tokens of steps warmup..steps-1 over the time from the end of step warmup-1 (0 without
    warm-up) to the end of step steps-1."""
    if len(step_end_s) < w.steps or len(step_tokens) < w.steps:
        raise ValueError(
            f"window {w.describe()}: the run has {min(len(step_end_s), len(step_tokens))} steps"
        )
    start = step_end_s[w.warmup - 1] if w.warmup else 0.0
    span = step_end_s[w.steps - 1] - start
    if span <= 0:
        raise ValueError(f"window {w.describe()}: spans {span} s")
    return sum(step_tokens[w.warmup : w.steps]) / span


@dataclass(frozen=True)
class Spread:
    """A figure over seeds."""

    mean: float
    lo: float
    hi: float
    n: int

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread:
        vals = list(values)
        if not vals:
            raise ValueError("Spread.of: no values")
        return cls(statistics.fmean(vals), min(vals), max(vals), len(vals))

    def fmt(self, spec: str = ",.0f", prefix: str = "") -> str:
        """`mean (lo-hi)`, or just the mean for a single value."""
        m = f"{prefix}{self.mean:{spec}}"
        return m if self.n == 1 else f"{m} ({self.lo:{spec}}-{self.hi:{spec}})"
