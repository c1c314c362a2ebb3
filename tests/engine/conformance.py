"""What every backend must do behind `InferenceEngine`, as one scenario over one engine: it
drives the protocol and records what happened as JSON-able data, which
tests/engine/test_conformance.py holds to the same rules for every backend. Not a test file: it
also runs inside vLLM's CPU venv (tests/engine/vllm_driver.py), where there is no pytest.

The rules need no model oracle: greedy decoding is its own reference (a partial resumed after an
abort, or after a shift down and up, ends with the tokens of the uninterrupted run), and the
weight versions a sequence records say which weights made which of its tokens.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch

from pivot.engine import InferenceEngine, Output, Request, SamplingParams
from pivot.engine.protocol import InferenceEngine as Protocol

PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12, 13], [20, 21, 22, 23, 24, 25, 26, 27]]
NEW = 12
"""Tokens each greedy request makes."""
UPDATED = 16
"""Tokens of the request a weight update meets in flight."""
MEMBERS = sorted(
    name
    for name in {*vars(Protocol), *Protocol.__annotations__}
    if not name.startswith("_") and name not in {"copy_with", "register"}
)
"""Every operation and attribute of the protocol."""


def greedy(i: int, n: int = NEW) -> Request:
    """Request `i` over PROMPTS[i % 3], greedy, `n` tokens whatever the model says (no EOS)."""
    return Request(
        i,
        list(PROMPTS[i % len(PROMPTS)]),
        SamplingParams(temperature=0, max_new_tokens=n, ignore_eos=True),
    )


def run(engine: InferenceEngine, until: int | None = None) -> dict[int, Output]:
    """Step until nothing runs, or until every running request has `until` tokens."""
    done: dict[int, Output] = {}
    while engine.has_work():
        if until is not None and all(n >= until for n in engine.progress().values()):
            break
        done.update({o.id: o for o in engine.step()})
    return done


def record(o: Output) -> dict[str, Any]:
    return {
        "ids": o.output_ids,
        "logprobs": o.output_logprobs,
        "reason": o.finish_reason,
        "version": o.weights_version,
        "starts": [list(s) for s in o.versions.starts],
    }


def refused(call: Callable[[], object]) -> str:
    """The exception `call` raised, by class name ("" if none)."""
    try:
        call()
    except Exception as e:  # noqa: BLE001 - which one is what is recorded
        return type(e).__name__
    return ""


def scenario(
    engine: InferenceEngine, w0: dict[str, torch.Tensor], w1: dict[str, torch.Tensor]
) -> dict[str, Any]:
    """Drive `engine` (just built, weights not loaded yet) through the whole protocol; `w0` and
    `w1` are two full sets of its HF-named weights."""
    out: dict[str, Any] = {"missing": [m for m in MEMBERS if not hasattr(engine, m)]}
    buffers = engine.weight_buffers()
    out["buffers"] = isinstance(buffers, dict)
    engine.load_weights({**buffers, **w0}, version=0)
    out["idle"] = [engine.has_work(), engine.step(), engine.weights_version]
    out["refused_long"] = refused(
        lambda: engine.add(Request(99, [5] * (engine.max_len + 1), SamplingParams()))
    )
    out["refused_missing"] = refused(
        lambda: engine.load_weights({next(iter(w0)): next(iter(w0.values()))}, version=9)
    )
    out["admits"] = [engine.can_admit(8), engine.can_admit(engine.max_len)]
    # 1. the uninterrupted greedy runs: the reference
    engine.add_all([greedy(i) for i in range(3)])
    s = engine.stats()
    out["added"] = {"n_seq": s.n_seq, "n_tok": s.n_tok, "progress": engine.progress()}
    out["reference"] = {o.id: record(o) for o in run(engine).values()}
    s = engine.stats()
    out["after"] = {"n_seq": s.n_seq, "kv_total": s.kv_total_tokens, "made": s.tokens_generated}
    # 2. abort after some tokens (one unknown id): the partial keeps them and, added again,
    # continues to the reference's tokens
    engine.add(greedy(10))
    run(engine, until=4)
    aborted = engine.abort([10, 999])
    (partial,) = aborted
    out["abort"] = {
        "unknown": aborted.unknown_ids,
        "ids": partial.output_ids,
        "logprobs": len(partial.output_logprobs),
        "has_work": engine.has_work(),
    }
    engine.add(partial)
    out["resumed"] = record(run(engine)[10])
    # 3. shift down (release) with requests running, up again (resume + weights): nothing lost
    engine.add_all([greedy(20), greedy(21)])
    run(engine, until=3)
    t0 = time.perf_counter()
    partials = engine.release()
    t1 = time.perf_counter()
    out["released"] = {p.id: len(p.output_ids) for p in partials}
    out["released_idle"] = engine.has_work()
    engine.resume()
    t2 = time.perf_counter()
    engine.load_weights({**engine.weight_buffers(), **w0}, version=0)
    seconds = {"release": t1 - t0, "resume": t2 - t1, "load": time.perf_counter() - t2}
    engine.add_all(list(partials))
    out["shifted"] = {o.id: record(o) for o in run(engine).values()}
    # 4. new weights in flight: the running request keeps going, its later tokens labelled
    engine.add(greedy(30, n=UPDATED))
    run(engine, until=4)
    t0 = time.perf_counter()
    engine.load_weights({**engine.weight_buffers(), **w1}, version=1)
    out["seconds"] = {**seconds, "update": time.perf_counter() - t0}
    out["update_kept"] = [engine.has_work(), engine.weights_version]
    out["updated"] = record(run(engine)[30])
    engine.add(greedy(31))
    out["after_update"] = record(run(engine)[31])
    out["whole_weights"] = refused(engine.named_parameters_hf)
    # 5. salvage, as after a failure: the requests held, with the tokens made so far (the last
    # call: what the engine runs after it is left to the shutdown that follows a failure)
    engine.add_all([greedy(40), greedy(41)])
    run(engine, until=4)
    out["salvaged"] = {r.id: [r.output_ids, len(r.output_logprobs)] for r in engine.salvage()}
    out["salvaged_idle"] = [engine.has_work(), engine.progress()]
    return out
