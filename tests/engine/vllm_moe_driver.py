"""Serves a Qwen3-MoE folder with `VllmEngine` inside vLLM's CPU venv, its weights loaded the way a
GPS Read loads them (the engine starts on dummy weights), and prints one JSON line: greedy tokens
after a load with the CPU repairs and after one without. tests/engine/test_vllm_moe.py holds them
against transformers. Not a test file: run as `VENV_PYTHON tests/engine/vllm_moe_driver.py DIR TP`."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from safetensors.torch import load_file

from pivot.engine import EngineConfig, Request, SamplingParams
from pivot.engine.backends.vllm_adapter import VllmEngine

PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12, 13], [20, 21, 22, 23, 24, 25, 26, 27]]
NEW = 10
KV_TOKENS = 4096  # below the folder's max_position_embeddings (40,960, as on the hub)


def greedy(engine: VllmEngine, first_id: int) -> list[list[int]]:
    for i, prompt in enumerate(PROMPTS):
        sampling = SamplingParams(temperature=0, max_new_tokens=NEW, ignore_eos=True)
        engine.add(Request(first_id + i, list(prompt), sampling))
    done: dict[int, list[int]] = {}
    while engine.has_work():
        done.update({o.id: o.output_ids for o in engine.step()})
    return [done[first_id + i] for i in range(len(PROMPTS))]


def main(folder: Path, tp: int) -> dict:
    # vLLM's CPU workers each bind their threads to a NUMA node unless told which cores to use;
    # this machine has one node, so TP 2 is refused without it
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "|".join(str(i) for i in range(tp)))
    config = EngineConfig(kv_capacity_tokens=KV_TOKENS, max_running_seqs=4)
    engine = VllmEngine.from_pretrained(folder, config, dtype="float32", tp_size=tp)
    weights = {}
    for f in sorted(folder.glob("*.safetensors")):
        weights.update(load_file(str(f)))
    try:
        engine.load_weights(weights, version=0)
        repaired = greedy(engine, 0)
        engine.load_weights(weights, version=1, repair=False)
        unrepaired = greedy(engine, 10)
        return {
            "repaired": repaired,
            "unrepaired": unrepaired,
            "kv_total": engine.requests.kv_total,
            "max_len": engine.max_len,
        }
    finally:
        engine.shutdown()


if __name__ == "__main__":  # vLLM spawns its engine core: the guard keeps it from re-running this
    print(json.dumps(main(Path(sys.argv[1]), int(sys.argv[2]))))
