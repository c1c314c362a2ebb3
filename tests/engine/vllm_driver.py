"""Drives `VllmEngine` through Pivot's engine protocol inside vLLM's CPU venv (tools/vllm_venv.py)
and prints what happened as one JSON line; tests/engine/test_vllm.py holds it against
transformers in the main venv. Not a test file: run as
`VENV_PYTHON tests/engine/vllm_driver.py MODEL_DIR NEW_WEIGHTS_DIR`."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from safetensors.torch import load_file

from pivot.engine import EngineConfig, Output, Request, SamplingParams
from pivot.engine.backends.vllm_adapter import VllmEngine

PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12, 13], [20, 21, 22, 23, 24, 25, 26, 27]]
NEW = 12


def greedy(i: int, n: int = NEW) -> Request:
    return Request(
        i, list(PROMPTS[i % len(PROMPTS)]), SamplingParams(temperature=0, max_new_tokens=n)
    )


def run(engine: VllmEngine, until: int | None = None) -> dict[int, Output]:
    """Step until nothing runs, or until every running request has `until` tokens."""
    done: dict[int, Output] = {}
    while engine.has_work():
        if until is not None and all(n >= until for n in engine.progress().values()):
            break
        done.update({o.id: o for o in engine.step()})
    return done


def record(o: Output) -> dict:
    return {
        "ids": o.output_ids,
        "logprobs": o.output_logprobs,
        "reason": o.finish_reason,
        "version": o.weights_version,
        "starts": o.version_starts,
    }


def main(model: Path, new_weights: Path) -> dict:
    cfg = EngineConfig(kv_capacity_tokens=4096, max_running_seqs=8)
    t0 = time.perf_counter()
    a = VllmEngine.from_pretrained(model, cfg, dtype="float32")
    b = VllmEngine.from_pretrained(model, cfg, dtype="float32")
    out: dict = {"build_s": (time.perf_counter() - t0) / 2, "kv_total": a.kv_total}
    w0, w1 = (
        load_file(str(model / "model.safetensors")),
        load_file(str(new_weights / "model.safetensors")),
    )
    a.load_weights(w0, version=0)
    b.load_weights(w0, version=0)
    # 1. greedy parity with transformers
    for i in range(3):
        a.add(greedy(i))
    out["parity"] = {o.id: record(o) for o in run(a).values()}
    # seeded sampling reproduces: the same seed twice gives the same tokens, another seed others
    for rid, seed in ((40, 7), (41, 7), (42, 8)):
        a.add(
            Request(
                rid,
                list(PROMPTS[0]),
                SamplingParams(temperature=1.0, max_new_tokens=NEW, seed=seed),
            )
        )
    out["seeded"] = {o.id: o.output_ids for o in run(a).values()}
    # 2. abort on one replica after 4 tokens, resume on another with the tokens kept
    a.add(greedy(10))
    run(a, until=4)
    (partial,) = a.abort([10])
    out["abort_at"] = len(partial.output_ids)
    b.add(partial)
    out["resumed"] = record(run(b)[10])
    # 3. shift down (release) and up (resume + weights) with requests running
    for i in (20, 21):
        b.add(greedy(i))
    run(b, until=3)
    t0 = time.perf_counter()
    partials = b.release()
    t1 = time.perf_counter()
    b.resume()
    t2 = time.perf_counter()
    b.load_weights(w0, version=0)
    out.update(release_s=t1 - t0, resume_s=t2 - t1, load_s=time.perf_counter() - t2)
    out["released_at"] = {p.id: len(p.output_ids) for p in partials}
    for p in partials:
        b.add(p)
    out["shifted"] = {o.id: record(o) for o in run(b).values()}
    # 4. the policy updated in flight, with and without the tied-embedding repair
    for repair, rid in ((True, 30), (False, 31)):
        a.load_weights(w0, version=0)
        a.add(greedy(rid, n=16))
        run(a, until=4)
        t0 = time.perf_counter()
        a.load_weights(w1, version=1, repair=repair)
        out.setdefault("update_s", time.perf_counter() - t0)
        out[f"updated_repair_{repair}"] = record(run(a)[rid])
    a.shutdown()
    b.shutdown()
    return out


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), Path(sys.argv[2]))))
