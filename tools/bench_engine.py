"""Generated tokens/s of Pivot's embedded engine vs Hugging Face `generate`, same model, same run.

Workloads: N requests with long-tail output lengths (log-normal, clipped) or the synthetic
task's solution lengths, and a GRPO batch (N/G prompts, each sent G times, long-tail lengths).
EOS is ignored so each request generates exactly its length. The engine keeps at most B
sequences running (continuous batching, shared prompt prefixes); `generate` runs static
batches of B, each lasting as long as its longest member (what a static-batching rollout
does), and only each request's own tokens count as useful. Prints tokens/s for both, the
ratio engine / generate, the prefill tokens the engine computed against those it would have
without prefix sharing, and whether the targets of issue 17 are met.

    python tools/bench_engine.py            # ~3-5 minutes on 2 CPU cores
    python tools/bench_engine.py --quick    # a quarter of the requests
    python tools/bench_engine.py --vllm     # embedded vs vLLM instead (tools/bench_engine_vllm.py;
                                            # --model PATH --device cuda: your model and GPU)
    python tools/bench_engine.py --device cuda   # decode step vs HBM floor (tools/bench_decode.py)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_engine_model import bench_model  # noqa: E402

from pivot.engine import Engine, EngineConfig, EngineStats, Request, SamplingParams  # noqa: E402


def long_tail_lengths(
    n: int, rng: np.random.Generator, median: float, sigma: float, cap: int
) -> list[int]:
    return np.clip(np.round(rng.lognormal(np.log(median), sigma, n)), 4, cap).astype(int).tolist()


def task_lengths(n: int, seed: int) -> list[int]:
    """Lengths of the synthetic task's worked solutions (its tokenizer is digit-level)."""
    from pivot.tiny import synthetic as syn

    return [len(syn.worked_solution(p)) for p in syn.generate_problems(n, seed)]


def bench_engine(
    path: Path, prompts: list[list[int]], lengths: list[int], batch: int
) -> tuple[float, int, EngineStats]:
    cfg = EngineConfig(
        kv_capacity_tokens=max(65536, batch * 1024),
        block_size=16,
        max_running_seqs=batch,
        max_prefill_tokens=2048,
    )
    engine = Engine.from_pretrained(path, cfg)
    for i, (p, n) in enumerate(zip(prompts, lengths)):
        engine.add(Request(i, p, SamplingParams(temperature=0, max_new_tokens=n, ignore_eos=True)))
    t0 = time.perf_counter()
    tokens = 0
    while engine.has_work():
        tokens += sum(len(o.output_ids) for o in engine.step())
    return time.perf_counter() - t0, tokens, engine.stats()


@torch.inference_mode()
def bench_generate(
    path: Path, prompts: list[list[int]], lengths: list[int], batch: int
) -> tuple[float, int]:
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(path).eval()
    t0 = time.perf_counter()
    useful = 0
    for s in range(0, len(prompts), batch):
        ps, ls = prompts[s : s + batch], lengths[s : s + batch]
        width = max(map(len, ps))
        ids = torch.tensor([[0] * (width - len(p)) + p for p in ps])  # left padding
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in ps])
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=max(ls),
            min_new_tokens=max(ls),
            do_sample=False,
            pad_token_id=0,
        )
        assert out.shape[1] == width + max(ls)
        useful += sum(ls)
    return time.perf_counter() - t0, useful


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--median", type=float, default=32.0, help="median output length")
    ap.add_argument("--sigma", type=float, default=1.0, help="log-normal sigma (tail weight)")
    ap.add_argument("--cap", type=int, default=512, help="longest output")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--group", type=int, default=8, help="GRPO group size G of the group workload")
    ap.add_argument("--quick", action="store_true", help="fewer requests for every row")
    ap.add_argument(
        "--only",
        default="",
        help="comma-separated rows to run, as 'workload@batch' (e.g. 'long-tail@32')",
    )
    ap.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch intra-op threads (1: steadier on a shared box)",
    )
    ap.add_argument(
        "--vllm",
        action="store_true",
        help="compare the embedded engine with vLLM's CPU build instead (in vLLM's venv; flags: "
        "python tools/bench_engine_vllm.py --help)",
    )
    ap.add_argument(
        "--device",
        default="cpu",
        help="cuda: the decode step against the HBM floor and transformers instead "
        "(tools/bench_decode.py; its flags: python tools/bench_decode.py --help)",
    )
    if "--vllm" in sys.argv:  # its own flags (--batches, --new, --model, --device, ...)
        from tools.bench_engine_vllm import main as vs_vllm

        vs_vllm(sys.argv[1:])
        return
    if ap.parse_known_args()[0].device != "cpu":  # its own flags: tools/bench_decode.py
        from tools.bench_decode import main as decode_step

        decode_step(sys.argv[1:])
        return
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    tmp, model = bench_model(a.hidden, a.layers)
    n_params = sum(p.numel() for p in model.parameters())
    scale = 4 if a.quick else 1
    n = a.requests // scale
    prompts = [rng.integers(2, 512, int(k)).tolist() for k in rng.integers(16, 48, n)]
    tail = long_tail_lengths(n, rng, a.median, a.sigma, a.cap)
    grouped = [p for p in prompts[: n // a.group] for _ in range(a.group)]
    rows = [
        ("long-tail", 32, n, prompts, tail),
        ("task lengths", 32, n, prompts, task_lengths(n, a.seed)),
        (f"GRPO G={a.group}", 32, len(grouped), grouped, tail),
    ]
    rows += [
        ("long-tail", 1, max(n // 16, 4), prompts, tail),
        ("long-tail", 8, n // 4, prompts, tail),
        ("long-tail", 64, n, prompts, tail),
    ]
    print(
        f"model: qwen2 hidden={a.hidden} layers={a.layers} ({n_params / 1e6:.2f}M params), "
        f"torch threads={torch.get_num_threads()}, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    print(
        f"long-tail lengths: median={np.median(tail):.0f} mean={np.mean(tail):.1f} p99={np.percentile(tail, 99):.0f} "
        f"max={max(tail)}"
    )
    print(
        f"{'workload':<14}{'batch':>6}{'reqs':>6}{'engine tok/s':>14}{'generate tok/s':>16}{'ratio':>8}"
        f"{'prefill computed / unshared':>30}"
    )
    result = {}
    wanted = {w.strip() for w in a.only.split(",") if w.strip()}
    for name, batch, count, ps, lengths in rows:
        if wanted and f"{name}@{batch}" not in wanted:
            continue
        ps, ls = ps[:count], lengths[:count]
        te, ne, stats = bench_engine(tmp, ps, ls, batch)
        tg, ng = bench_generate(tmp, ps, ls, batch)
        assert ne == ng == sum(ls)
        unshared = stats.prefill_tokens + stats.prefix_hit_tokens
        assert unshared == sum(map(len, ps))
        result[name, batch] = (ne / te, (ne / te) / (ng / tg), 1 - stats.prefill_tokens / unshared)
        print(
            f"{name:<14}{batch:>6}{count:>6}{ne / te:>14.0f}{ng / tg:>16.0f}{(ne / te) / (ng / tg):>7.2f}x"
            f"{stats.prefill_tokens:>13} / {unshared:<6} ({result[name, batch][2]:.0%} saved)",
            flush=True,
        )
    group = f"GRPO G={a.group}"
    targets = [
        (
            "long-tail ratio at batch 32 >= 3.0",
            [("long-tail", 32)],
            lambda: result["long-tail", 32][1] >= 3.0,
        ),
        (
            "task-length ratio at batch 32 >= 1.5",
            [("task lengths", 32)],
            lambda: result["task lengths", 32][1] >= 1.5,
        ),
        (
            "long-tail tokens/s: batch 32 > batch 8",
            [("long-tail", 32), ("long-tail", 8)],
            lambda: result["long-tail", 32][0] > result["long-tail", 8][0],
        ),
        (f"{group} prefill saved >= 80%", [(group, 32)], lambda: result[group, 32][2] >= 0.8),
    ]
    for text, needs, met in targets:
        if all(k in result for k in needs):
            print(f"target {text}: {'met' if met() else 'NOT met'}")
    print(f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
