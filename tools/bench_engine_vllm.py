"""Pivot's embedded engine vs vLLM on the same model, same device, same run
(`python tools/bench_engine.py --vllm`). Without vLLM in this Python it re-runs itself in the
CPU build's venv (tools/vllm_venv.py) on a tiny model; with vLLM installed (a GPU venv from
requirements-gpu-vllm.txt) it runs here, on your model and GPU:

    python tools/bench_engine.py --vllm                                   # CPU, tiny model
    python tools/bench_engine.py --vllm --model /models/Qwen2.5-7B --device cuda --dtype bfloat16

On CUDA each engine's median decode step is also printed against the floor: the bytes a step
reads (every weight once, each sequence's K/V at its median context) over the GPU's HBM
bandwidth (`--hbm-gbps`, or the data sheet's for a known GPU).

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
sys.path.insert(0, str(ROOT / "tools"))

from bench_engine_model import bench_model  # noqa: E402

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


def build(kind: str, folder: Path, batch: int, new: int, a: argparse.Namespace) -> Any:
    from pivot.engine import EngineConfig, build_engine
    from pivot.engine.capabilities import capabilities
    from pivot.model import load_state_dict

    cfg = EngineConfig(
        backend=kind,
        kv_capacity_tokens=batch * (PROMPT + new + 256) + 2048,
        max_running_seqs=batch,
        max_prefill_tokens=2048,
    )
    engine = build_engine(folder, cfg, dtype=a.dtype, device=a.device)
    # a production engine (it owns its processes) starts on dummy weights, as in a job: load
    # the folder's, in Pivot's names
    if capabilities(kind).owns_processes:
        engine.load_weights(load_state_dict(folder), version=0)
    return engine


def floor_ms(folder: Path, params: int, batch: int, ctx: int, a: argparse.Namespace) -> float:
    """The decode step's bytes (`params` weights once, K/V of `batch` sequences of `ctx`) over
    the GPU's HBM bandwidth; nan when it is unknown."""
    import torch

    from pivot.engine.backends.vllm_build import kv_bytes_per_token
    from tools.bench_decode import hbm_gbps

    gbps = hbm_gbps(torch.cuda.get_device_name(a.device), a.hbm_gbps)
    dtype = getattr(torch, a.dtype)
    weights = params * torch.empty((), dtype=dtype).element_size()
    kv = batch * ctx * kv_bytes_per_token(folder, dtype)
    return (weights + kv) / (gbps * 1e9) * 1e3 if gbps else float("nan")


def measure(a: argparse.Namespace) -> None:
    import torch

    from pivot.model.hf_folder import tensor_headers, text_config

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    cuda = a.device.startswith("cuda")
    if a.model:
        folder = Path(a.model)
        shape = f"{folder.name}, {a.dtype}"
    else:
        folder, _ = bench_model(a.hidden, a.layers)
        shape = f"qwen2 hidden={a.hidden} layers={a.layers} head_dim=32, {a.dtype}"
    params = sum(torch.Size(s).numel() for s, _ in tensor_headers(folder).values())
    vocab = int(text_config(folder)["vocab_size"])
    batches = [int(b) for b in a.batches.split(",")]
    where = (
        torch.cuda.get_device_name(a.device)
        if cuda
        else f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, torch "
        f"threads {torch.get_num_threads()} (vLLM's CPU worker: its own binding)"
    )
    print(
        f"regime: {shape} ({params / 1e6:,.2f}M params), {PROMPT}-token prompts, {a.new} new tokens "
        f"each, greedy; {where}, load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    print(f"{'batch':>6}{'embedded tok/s':>16}{'vLLM tok/s':>12}{'ratio':>8}"
          f"{'embedded ms/step':>18}{'vLLM ms/step':>14}{'ratio':>8}"
          + (f"{'floor ms':>10}{'emb. x':>8}{'vLLM x':>8}" if cuda else ""))  # fmt: skip
    for batch in batches:
        got = {}
        for kind in ("embedded", "vllm"):
            engine = build(kind, folder, batch, a.new, a)
            run_batch(engine, min(batch, 4), 8, vocab)  # warm-up
            got[kind] = run_batch(engine, batch, a.new, vocab)
            if hasattr(engine, "shutdown"):
                engine.shutdown()
            del engine
            if cuda:
                torch.cuda.empty_cache()
        (te, le), (tv, lv) = got["embedded"], got["vllm"]
        line = (f"{batch:>6}{te:>16.0f}{tv:>12.0f}{tv / te:>7.2f}x{le * 1e3:>18.2f}"
                f"{lv * 1e3:>14.2f}{lv / le:>7.2f}x")  # fmt: skip
        if cuda:  # the floor at the median context of the measured steps
            fl = floor_ms(folder, params, batch, PROMPT + a.new // 2, a)
            line += f"{fl:>10.2f}{le * 1e3 / fl:>7.1f}x{lv * 1e3 / fl:>7.1f}x"
        print(line, flush=True)
    print(
        f"load average {os.getloadavg()[0]:.1f} at the end (ratio > 1: vLLM faster in tok/s, slower in ms/step)"
    )


def main(argv: list[str]) -> None:
    """`measure` here when vLLM imports (a GPU venv), else in the CPU build's venv, whose Python
    runs this file (built first if need be)."""
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        measure(parse([x for x in argv if x != "--vllm"]))
        return
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
    ap.add_argument("--model", default="", help="HF model folder (default: a tiny random one)")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda[:N] (vLLM's GPU build)")
    ap.add_argument("--dtype", default="float32", help="float32, bfloat16 (GPU), float16")
    ap.add_argument("--hbm-gbps", type=float, default=0.0, help="GPU memory bandwidth, GB/s")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vllm", action="store_true", help="(how tools/bench_engine.py asks for this)")
    return ap.parse_args(argv)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    measure(parse(sys.argv[1:]))
