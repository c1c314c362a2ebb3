"""Per-replica throughput model (paper §6.1, Appendix A).

    latency(N_seq, N_tok) = A * N_tok + max(B, C * N_seq) + D       (seconds per decode step)
    T                     = N_seq / latency                           (tokens per second)
    dT(l)                 = (N_seq + 1) / latency(N_seq + 1, N_tok + l) - T

`A` prices the KV-cache reads of attention, `max(B, C * N_seq)` the FFN (weight loading vs
compute bound) and `D` the rest. `step_latency` is the one latency formula (the model, the
simulated replicas and the emulated devices call it; `load_terms` inlines the same terms for
speed). `load_terms` is the one place T_i and dT are computed from a replica's load: the
model's methods, the scheduler and the planner's what-if runs all call it,
so they agree bit for bit. `ThroughputModel.fit` recovers A, B, C, D from profiled
(n_seq, n_tok, latency) samples; it is pure Python (least squares over the knee n* = B / C).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

MIGRATION_MIN_GAIN = 1e-12
"""A migration step is kept only if it raises Σ T_i by more than this (relative): float noise."""


def step_latency(a: float, b: float, c: float, d: float, n: float, tok: float) -> float:
    """Seconds of one decode step with `n` running sequences holding `tok` tokens: the model's
    `A * N_tok + max(B, C * N_seq) + D`, for callers that hold the constants, not a model."""
    return a * tok + max(b, c * n) + d


def load_terms(a: float, b: float, c: float, d: float, n: int, tok: int) -> tuple[float, float]:
    """(T_i, base) of a replica with constants A, B, C, D running `n` sequences over `tok` tokens:
    T_i = n / latency(n, tok) (0 when n = 0) and base = latency(n + 1, tok), so that adding a
    sequence of length l gains dT(l) = (n + 1) / (base + A * l) - T_i (free of the load's terms,
    the dispatch's arg-max evaluates it per replica with one multiply-add)."""
    a_tok, cn, cn1 = a * tok, c * n, c * (n + 1)  # max(B, C*n) as a conditional: no builtin call
    return (n / (a_tok + (b if b >= cn else cn) + d) if n else 0.0), a_tok + (
        b if b >= cn1 else cn1
    ) + d


@dataclass(frozen=True, slots=True)
class ThroughputModel:
    """Constants of the decode-latency model; all must be finite and >= 0."""

    A: float
    B: float
    C: float
    D: float
    prefill_s_per_token: float = 0.0
    """Seconds per prompt token of a prefill, where a profile timed it (0.0: not timed). Not a
    decode constant: the planner prices a re-prefill at C per token (pivot/plan/pairs.py); the
    training slot's sizing calibrates the cost model's prefill with it (pivot/sim/autosize.py)."""

    def __post_init__(self) -> None:
        for name in ("A", "B", "C", "D", "prefill_s_per_token"):
            value = getattr(self, name)
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"ThroughputModel.{name} must be finite and >= 0, got {value!r}")
        if self.B + self.D <= 0 and self.C <= 0:
            raise ValueError("ThroughputModel needs B + D > 0 or C > 0 (latency would be 0)")

    def latency(self, n_seq: float, n_tok: float) -> float:
        """Seconds per decode step with `n_seq` running sequences holding `n_tok` tokens."""
        return step_latency(self.A, self.B, self.C, self.D, n_seq, n_tok)

    def throughput(self, n_seq: int, n_tok: int) -> float:
        """Generated tokens per second; 0 when no sequence runs."""
        return load_terms(self.A, self.B, self.C, self.D, max(n_seq, 0), n_tok)[0]

    def gain(self, n_seq: int, n_tok: int, seq_len: int) -> float:
        """The paper's dT: throughput change from adding one sequence of length `seq_len`."""
        thr, base = load_terms(self.A, self.B, self.C, self.D, n_seq, n_tok)
        return (n_seq + 1) / (base + self.A * seq_len) - thr

    @classmethod
    def fit(cls, samples: Iterable[Sequence[float]]) -> ThroughputModel:
        """Least-squares fit of A, B, C, D to (n_seq, n_tok, latency) triples.

        For a fixed knee k the model is linear: latency = A*n_tok + C*max(k, n_seq) + D with
        B = C*k. We try every observed n_seq as the knee (plus 0, a purely linear FFN term),
        refine around the best one by golden-section search, and keep the least squared error.
        Each knee's fit is constrained to A, C, D >= 0 (exactly, over the active sets): noisy
        timings can make the unconstrained solution negative, and clamping it afterwards is
        not a fit (a tiny profile's three points once clamped to all zeros). Samples whose best
        fit has no per-step cost (latency proportional to tokens alone) are refused: a decode
        step always has one, so they are too few or too noisy to say what it is.
        """
        rows = [tuple(float(v) for v in s) for s in samples]
        for i, row in enumerate(rows):
            if len(row) != 3:
                raise ValueError(f"fit: sample {i} must be (n_seq, n_tok, latency), got {row!r}")
            if row[0] < 1 or row[1] < 0 or row[2] <= 0 or not all(map(math.isfinite, row)):
                raise ValueError(f"fit: sample {i} has invalid values {row!r}")
        if len(rows) < 3:
            raise ValueError(f"fit: need at least 3 samples, got {len(rows)}")
        knees = sorted({0.0, *(r[0] for r in rows)})
        best = min((_fit_at_knee(rows, k) for k in knees), key=lambda f: f[0])
        i = knees.index(best[4])
        lo, hi = knees[max(i - 1, 0)], knees[min(i + 1, len(knees) - 1)]
        best = min(best, _golden(rows, lo, hi), key=lambda f: f[0])
        _, a, c, d, k = best
        if c <= 0 and d <= 0:
            raise ValueError(
                f"fit: the {len(rows)} samples' best fit has no per-step cost (latency grows with "
                "tokens alone); time more steps or more points"
            )
        return cls(A=a, B=c * k, C=c, D=d)


# The supports (nonzero features of n_tok, max(knee, n_seq), 1) of a non-negative fit.
_ACTIVE_SETS = ((0, 1, 2), (0, 1), (0, 2), (1, 2), (0,), (1,), (2,))


def _fit_at_knee(
    rows: list[tuple[float, ...]], knee: float
) -> tuple[float, float, float, float, float]:
    """(sse, A, C, D, knee): least squares with feature max(knee, n_seq) and A, C, D >= 0.

    Non-negative least squares over three features is exact by enumeration: the optimum is
    the unconstrained fit on some subset of the features with the rest at 0."""
    xs = [(r[1], max(knee, r[0]), 1.0) for r in rows]
    ys = [r[2] for r in rows]
    best: tuple[float, float, float, float, float] | None = None
    for active in _ACTIVE_SETS:
        coef = [0.0, 0.0, 0.0]
        for i, value in zip(active, _lstsq([[x[i] for i in active] for x in xs], ys)):
            coef[i] = value
        if min(coef) < 0:
            continue
        sse = sum((sum(c * x for c, x in zip(coef, xr)) - y) ** 2 for xr, y in zip(xs, ys))
        if best is None or sse < best[0]:
            best = (sse, coef[0], coef[1], coef[2], knee)
    assert best is not None  # D alone, the mean latency, is > 0
    return best


def _golden(
    rows: list[tuple[float, ...]], lo: float, hi: float
) -> tuple[float, float, float, float, float]:
    """Golden-section search of the knee in [lo, hi] (SSE is smooth between observed n_seq)."""
    g = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    for _ in range(40):
        c, d = b - g * (b - a), a + g * (b - a)
        if _fit_at_knee(rows, c)[0] <= _fit_at_knee(rows, d)[0]:
            b = d
        else:
            a = c
    return _fit_at_knee(rows, (a + b) / 2)


def _lstsq(xs: list[list[float]], ys: list[float]) -> list[float]:
    """Solve the normal equations (with a tiny ridge so degenerate columns stay finite)."""
    n = len(xs[0])
    m = [[sum(x[i] * x[j] for x in xs) for j in range(n)] for i in range(n)]
    v = [sum(x[i] * y for x, y in zip(xs, ys)) for i in range(n)]
    for i in range(n):
        m[i][i] += 1e-12 * (m[i][i] + 1.0)
    for col in range(n):  # Gaussian elimination with partial pivoting
        piv = max(range(col, n), key=lambda r: abs(m[r][col]))
        m[col], m[piv], v[col], v[piv] = m[piv], m[col], v[piv], v[col]
        for r in range(col + 1, n):
            f = m[r][col] / m[col][col]
            for j in range(col, n):
                m[r][j] -= f * m[col][j]
            v[r] -= f * v[col]
    out = [0.0] * n
    for i in reversed(range(n)):
        out[i] = (v[i] - sum(m[i][j] * out[j] for j in range(i + 1, n))) / m[i][i]
    return out
