"""Drives one vLLM engine (built by `build_engine`, `VllmEngine` behind the protocol) inside
vLLM's CPU venv (tools/vllm_venv.py) and prints what happened as one JSON line: the conformance
scenario every backend runs (tests/engine/conformance.py), then what only vLLM is asked here
(seeded sampling, an in-flight update without the tied-embedding repair).
tests/engine/test_conformance.py and tests/engine/test_vllm.py hold it, the latter against
transformers in the main venv. Not a test file: run as
`VENV_PYTHON tests/engine/vllm_driver.py MODEL_DIR NEW_WEIGHTS_DIR`."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from safetensors.torch import load_file

from pivot.engine import EngineConfig, Request, SamplingParams, build_engine
from tests.engine.conformance import NEW, PROMPTS, UPDATED, greedy, record, run, scenario


def main(model: Path, new_weights: Path) -> dict:
    cfg = EngineConfig(backend="vllm", kv_capacity_tokens=4096, max_running_seqs=8)
    t0 = time.perf_counter()
    engine = build_engine(model, cfg, dtype="float32")
    out: dict = {"build_s": time.perf_counter() - t0, "kv_total": engine.requests.kv_total}
    w0, w1 = (
        load_file(str(model / "model.safetensors")),
        load_file(str(new_weights / "model.safetensors")),
    )
    out["conformance"] = scenario(engine, w0, w1)
    engine.load_weights(w0, version=0)
    # seeded sampling reproduces: the same seed twice gives the same tokens, another seed others
    for rid, seed in ((40, 7), (41, 7), (42, 8)):
        engine.add(
            Request(
                rid,
                list(PROMPTS[0]),
                SamplingParams(temperature=1.0, max_new_tokens=NEW, seed=seed),
            )
        )
    out["seeded"] = {o.id: o.output_ids for o in run(engine).values()}
    # the policy updated in flight without the repair of vLLM's stale packed lm_head
    engine.add(greedy(32, n=UPDATED))
    run(engine, until=4)
    engine.load_weights(w1, version=1, repair=False)
    out["updated_unrepaired"] = record(run(engine)[32])
    engine.shutdown()
    return out


if __name__ == "__main__":
    print(json.dumps(main(Path(sys.argv[1]), Path(sys.argv[2]))))
