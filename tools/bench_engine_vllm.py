"""Pivot's embedded engine vs vLLM (its CPU build) on the same tiny model, CPU and run
(`python tools/bench_engine.py --vllm`; re-runs itself in vLLM's venv, tools/vllm_venv.py).

For each batch size B: B requests of a 64-token random prompt, each generating `--new` tokens
(greedy, EOS ignored), all added at once, both engines through Pivot's engine protocol with the
same weights (vLLM's reloaded from the same folder). Prints, per engine and batch: generated
tokens/s over the whole run (prefill included) and the median decode-step latency (steps where
every sequence decodes, per token each sequence gains), and vLLM's figure as a ratio of the
embedded engine's measured in the same run. The regime goes beside every figure: CPU model,
threads, load average, dtype.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PROMPT = 64


def run_batch(engine: Any, batch: int, new: int, vocab: int) -> tuple[float, float]:
    """(generated tokens/s over the run, median decode-step seconds per token)."""
    import random

    from pivot.engine import Request, SamplingParams

    rng = random.Random(batch)
    for i in range(batch):
        prompt = [rng.randrange(2, vocab) for _ in range(PROMPT)]
        engine.add(
            Request(i, prompt, SamplingParams(temperature=0, max_new_tokens=new, ignore_eos=True))
        )
    made, steps = 0, []
    t0 = time.perf_counter()
    while engine.has_work():
        before = engine.progress()
        t = time.perf_counter()
        made += sum(len(o.output_ids) for o in engine.step())
        elapsed, after = time.perf_counter() - t, engine.progress()
        gained = [after[i] - n for i, n in before.items() if i in after]
        if (
            len(before) == batch
            and len(gained) == batch
            and min(gained) >= 1
            and min(before.values()) >= 1
        ):
            steps.append(elapsed / min(gained))
    wall = time.perf_counter() - t0
    assert made == batch * new, (made, batch * new)
    return made / wall, statistics.median(steps) if steps else float("nan")


def build(kind: str, folder: Path, batch: int, new: int) -> Any:
    from safetensors.torch import load_file

    from pivot.engine import Engine, EngineConfig

    cfg = EngineConfig(
        backend=kind,
        kv_capacity_tokens=batch * (PROMPT + new + 256) + 2048,
        max_running_seqs=batch,
        max_prefill_tokens=2048,
    )
    engine = Engine.from_pretrained(folder, cfg, dtype="float32")
    if kind == "vllm":
        engine.load_weights(load_file(str(folder / "model.safetensors")), version=0)
    return engine


def measure(a: argparse.Namespace) -> None:
    import torch

    from tools.bench_engine import bench_model

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    folder, model = bench_model(a.hidden, a.layers)
    n_params = sum(p.numel() for p in model.parameters()) / 1e6
    batches = [int(b) for b in a.batches.split(",")]
    cpu = platform.processor() or platform.machine()
    print(
        f"regime: qwen2 hidden={a.hidden} layers={a.layers} head_dim=32 ({n_params:.2f}M params), "
        f"float32, {PROMPT}-token prompts, {a.new} new tokens each, greedy; {cpu}, "
        f"{os.cpu_count()} CPUs, torch threads {torch.get_num_threads()} (vLLM's CPU worker: its own "
        f"binding), load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    print(f"{'batch':>6}{'embedded tok/s':>16}{'vLLM tok/s':>12}{'ratio':>8}"
          f"{'embedded ms/step':>18}{'vLLM ms/step':>14}{'ratio':>8}")  # fmt: skip
    for batch in batches:
        got = {}
        for kind in ("embedded", "vllm"):
            engine = build(kind, folder, batch, a.new)
            run_batch(engine, min(batch, 4), 8, 512)  # warm-up
            got[kind] = run_batch(engine, batch, a.new, 512)
            if hasattr(engine, "shutdown"):
                engine.shutdown()
        (te, le), (tv, lv) = got["embedded"], got["vllm"]
        print(f"{batch:>6}{te:>16.0f}{tv:>12.0f}{tv / te:>7.2f}x{le * 1e3:>18.2f}{lv * 1e3:>14.2f}"
              f"{lv / le:>7.2f}x", flush=True)  # fmt: skip
    print(
        f"load average {os.getloadavg()[0]:.1f} at the end (ratio > 1: vLLM faster in tok/s, slower in ms/step)"
    )


def main(argv: list[str]) -> None:
    """`measure` in vLLM's venv, whose Python runs this file (built first if need be)."""
    from tools.vllm_venv import vllm_python

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [str(vllm_python()), "-m", "tools.bench_engine_vllm", *argv]
    raise SystemExit(subprocess.run(cmd, env=env, cwd=ROOT).returncode)


def parse(argv: list[str]) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batches", default="1,32,128")
    ap.add_argument("--new", type=int, default=128, help="tokens generated per request")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vllm", action="store_true", help="(how tools/bench_engine.py asks for this)")
    return ap.parse_args(argv)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    measure(parse(sys.argv[1:]))
