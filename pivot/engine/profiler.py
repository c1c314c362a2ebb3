"""Fit the paper's throughput model to an engine's measured decode steps.

Any `InferenceEngine` (embedded, vLLM, sglang; any TP size): the profiler only adds
requests, steps, reads `progress()` and `stats()`, and aborts, so a replica's constants are
measured on its own backend, model, device and TP.

`profile_engine` runs the engine over a grid of (N_seq running sequences, context length)
points, times decode steps (the fastest of a few, over shuffled passes) and the prefill of the
grid's longest prompts, a full chunk of them (`prefill_s_per_token`, which the training slot's
sizing calibrates the cost model's prefill with), fits

    latency = A * N_tok + max(B, C * N_seq) + D

with `ThroughputModel.fit` on all but a held-out quarter of the points, and writes the profile
(`pivot.sched.profile.write_profile`) with R^2 and the mean relative error on the held-out
points and on all. `tools/profile_engine.py` runs it offline over a large grid; the runtime runs
it at start-up over a small one for a role that has no profile yet.
"""

from __future__ import annotations

import dataclasses
import random
import statistics
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pivot.engine.protocol import InferenceEngine
from pivot.engine.sequence import Request, SamplingParams
from pivot.sched.profile import write_profile
from pivot.sched.throughput import ThroughputModel

Row = tuple[float, float, float]  # (n_seq, n_tok, latency s)


def vocab_size(engine: InferenceEngine) -> int:
    """Token ids the engine's model takes."""
    return int(engine.vocab_size)


def measure(
    engine: InferenceEngine, n_seq: int, ctx: int, steps: int, rng: random.Random
) -> tuple[float, float]:
    """(mean N_tok, fastest decode-step latency) with `n_seq` sequences of `ctx` prompt tokens.

    The fastest of `steps` steps, not the median: on a shared machine other processes only
    ever add time, so the minimum is the engine's own cost. Each sequence's token budget is its
    share of the KV cache (more would let the first ones grow while the last ones prefill, and
    the engine preempt), and every timed step must add a token to every sequence (else the
    point does not fit the engine). An engine whose core runs ahead
    of `step()` (vLLM) may hand over several tokens per sequence at once: the step's time is
    divided by them."""
    vocab = vocab_size(engine)
    budget = min(engine.max_len - ctx - 1, engine.stats().kv_total_tokens // n_seq - ctx - 1)
    for i in range(n_seq):
        prompt = [rng.randrange(2, vocab) for _ in range(ctx)]
        params = SamplingParams(temperature=0, max_new_tokens=budget, ignore_eos=True)
        engine.add(Request(i, prompt, params))
    while min(engine.progress().values(), default=0) < 1:
        engine.step()  # prefill (chunked) until every sequence decodes
    toks, lats = [], []
    for _ in range(steps):
        stats, before = engine.stats(), engine.progress()
        t0 = time.perf_counter()
        engine.step()
        elapsed = time.perf_counter() - t0
        after = engine.progress()
        made = min((after.get(i, 0) - n for i, n in before.items()), default=0)
        if stats.n_seq != n_seq or len(before) != n_seq or made < 1:
            raise RuntimeError(
                f"profile point ({n_seq} seqs, {ctx} tokens) is not fully decoding: engine too small"
            )
        lats.append(elapsed / made)
        toks.append(stats.n_tok)
    engine.abort(list(range(n_seq)))
    return statistics.mean(toks), min(lats)


PREFILL_TOKENS = 16_384
"""Prompt tokens prefill is timed on: one scheduler step's worth at vLLM's offline default on
an H100 or H200 (vllm 0.32.0 vllm/engine/arg_utils.py:2933-2937, `max_num_batched_tokens`; 8,192
on other GPUs, 4,096 a socket on CPU), so the rate is a full chunk's."""


def measure_prefill(
    engine: InferenceEngine, n_seq: int, ctx: int, passes: int, rng: random.Random
) -> float:
    """Seconds per prompt token of prefilling `n_seq` fresh prompts of `ctx` tokens, each asked
    for one token (made by its prefill's step, so no decode step is timed), the fastest of
    `passes`. Random prompts: no prefix is shared, so every token is computed."""
    vocab, best = vocab_size(engine), float("inf")
    for p in range(passes):
        ids = [(p + 1) * 1_000_000 + i for i in range(n_seq)]  # apart from `measure`'s ids
        params = SamplingParams(temperature=0, max_new_tokens=1, ignore_eos=True)
        requests = [Request(i, [rng.randrange(2, vocab) for _ in range(ctx)], params) for i in ids]
        t0 = time.perf_counter()
        engine.add_all(requests)
        while engine.has_work():
            engine.step()
        best = min(best, (time.perf_counter() - t0) / (n_seq * ctx))
    return best


def r2_and_mre(model: ThroughputModel, rows: Sequence[Row]) -> tuple[float, float]:
    ys = [r[2] for r in rows]
    pred = [model.latency(r[0], r[1]) for r in rows]
    mean = statistics.mean(ys)
    ss_tot = sum((y - mean) ** 2 for y in ys) or 1e-30
    ss_res = sum((y - p) ** 2 for y, p in zip(ys, pred))
    return 1 - ss_res / ss_tot, statistics.mean(abs(p - y) / y for y, p in zip(ys, pred))


def grid_fits(
    engine: InferenceEngine, seqs: Sequence[int], ctxs: Sequence[int], steps: int
) -> bool:
    """Whether every grid point fits the engine (running slots, max length, KV capacity)."""
    return (
        max(seqs) <= engine.config.max_running_seqs
        and max(ctxs) + steps + 2 < engine.max_len
        and max(seqs) * (max(ctxs) + steps + 2) <= engine.stats().kv_total_tokens
    )


def profile_engine(
    engine: InferenceEngine,
    out: str | Path,
    seqs: Sequence[int],
    ctxs: Sequence[int],
    steps: int = 7,
    passes: int = 2,
    seed: int = 0,
    log: Callable[[str], None] | None = None,
    **meta: Any,
) -> ThroughputModel:
    """Measure the grid, fit, write the profile to `out` (with `meta`); returns the constants.
    `log(line)` gets one line per point and the fit's quality."""
    if not grid_fits(engine, seqs, ctxs, steps):
        raise ValueError(
            f"profile grid (up to {max(seqs)} seqs of {max(ctxs)} tokens) does not fit the engine "
            f"({engine.config.max_running_seqs} seqs, max length {engine.max_len})"
        )
    say = log or (lambda line: None)
    rng = random.Random(seed)
    measure(engine, min(4, max(seqs)), min(32, max(ctxs)), 3, rng)  # warm-up
    t_start = time.perf_counter()
    points = [(n, c) for n in seqs for c in ctxs]
    best: dict[tuple[int, int], tuple[float, float]] = {}
    for _ in range(passes):  # shuffled passes: a burst of outside load hits different points
        rng.shuffle(points)
        for n_seq, ctx in points:
            n_tok, lat = measure(engine, n_seq, ctx, steps, rng)
            if (n_seq, ctx) not in best or lat < best[n_seq, ctx][1]:
                best[n_seq, ctx] = (n_tok, lat)
    # prefill in large chunks, as a run's prompts arrive: the grid's longest prompts, as many
    # as make one full chunk (more time the same rate, for longer)
    prompts = max(1, min(max(seqs), PREFILL_TOKENS // max(ctxs)))
    prefill_s = measure_prefill(engine, prompts, max(ctxs), passes, rng)
    rows: list[Row] = [(n_seq, n_tok, lat) for (n_seq, _), (n_tok, lat) in sorted(best.items())]
    for row_seqs, row_tok, row_lat in rows:
        say(f"N_seq={row_seqs:>4} N_tok={row_tok:>8.0f} latency={row_lat * 1e3:8.2f} ms")
    order = list(range(len(rows)))
    random.Random(seed + 1).shuffle(order)
    held = set(order[: max(len(rows) // 4, 1)])
    fitted = ThroughputModel.fit([r for i, r in enumerate(rows) if i not in held])
    model = dataclasses.replace(fitted, prefill_s_per_token=prefill_s)
    r2, mre = r2_and_mre(model, [rows[i] for i in sorted(held)])
    r2_all, mre_all = r2_and_mre(model, rows)
    say(
        f"fit: A={model.A:.3e} s/token  B={model.B:.3e} s  C={model.C:.3e} s/seq  D={model.D:.3e} s"
    )
    say(f"prefill: {prefill_s * 1e6:.2f} us/token ({prompts} prompts of {max(ctxs)} tokens)")
    say(f"held-out ({len(held)} points): R^2={r2:.4f}  mean relative error={mre:.3%}")
    say(f"all ({len(rows)} points):      R^2={r2_all:.4f}  mean relative error={mre_all:.3%}")
    write_profile(
        out,
        model,
        **meta,
        r2_heldout=r2,
        mre_heldout=mre,
        r2_all=r2_all,
        mre_all=mre_all,
        grid={"n_seq": list(seqs), "ctx": list(ctxs), "steps": steps, "passes": passes},
        samples=[list(r) for r in rows],
        profile_seconds=time.perf_counter() - t_start,
    )
    return model
