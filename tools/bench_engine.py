"""Generated tokens/s of Pivot's embedded engine vs Hugging Face `generate`, same model, same run.

Workload: N requests with long-tail output lengths (log-normal, clipped), EOS ignored so each
request generates exactly its length. The engine keeps at most B sequences running
(continuous batching); `generate` runs static batches of B, each lasting as long as its
longest member (what a static-batching rollout does), and only each request's own tokens
count as useful. Prints tokens/s for both and the ratio engine / generate.

    python tools/bench_engine.py            # ~2-3 minutes on 2 CPU cores
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pivot.engine import Engine, EngineConfig, Request, SamplingParams  # noqa: E402
from pivot.model import CausalLM, ModelArgs, save_pretrained  # noqa: E402


def long_tail_lengths(n: int, rng: np.random.Generator, median: float, sigma: float, cap: int) -> list[int]:
    return np.clip(np.round(rng.lognormal(np.log(median), sigma, n)), 4, cap).astype(int).tolist()


def task_lengths(n: int, seed: int) -> list[int]:
    """Lengths of the synthetic task's worked solutions (its tokenizer is digit-level)."""
    from pivot.tiny import synthetic as syn

    return [len(syn.worked_solution(p)) for p in syn.generate_problems(n, seed)]


def bench_engine(path: Path, prompts: list[list[int]], lengths: list[int], batch: int) -> tuple[float, int]:
    cfg = EngineConfig(kv_capacity_tokens=max(65536, batch * 1024), block_size=16, max_running_seqs=batch,
                       max_prefill_tokens=2048)
    engine = Engine.from_pretrained(path, cfg)
    for i, (p, n) in enumerate(zip(prompts, lengths)):
        engine.add(Request(i, p, SamplingParams(temperature=0, max_new_tokens=n, ignore_eos=True)))
    t0 = time.perf_counter()
    tokens = 0
    while engine.has_work():
        tokens += sum(len(o.output_ids) for o in engine.step())
    return time.perf_counter() - t0, tokens


@torch.inference_mode()
def bench_generate(path: Path, prompts: list[list[int]], lengths: list[int], batch: int) -> tuple[float, int]:
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(path).eval()
    t0 = time.perf_counter()
    useful = 0
    for s in range(0, len(prompts), batch):
        ps, ls = prompts[s : s + batch], lengths[s : s + batch]
        width = max(map(len, ps))
        ids = torch.tensor([[0] * (width - len(p)) + p for p in ps])  # left padding
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in ps])
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max(ls), min_new_tokens=max(ls),
                             do_sample=False, pad_token_id=0)
        assert out.shape[1] == width + max(ls)
        useful += sum(ls)
    return time.perf_counter() - t0, useful


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--median", type=float, default=32.0, help="median output length")
    ap.add_argument("--sigma", type=float, default=1.0, help="log-normal sigma (tail weight)")
    ap.add_argument("--cap", type=int, default=512, help="longest output")
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="fewer requests for every row")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (1: steadier on a shared box)")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    rng = np.random.default_rng(a.seed)
    heads = a.hidden // 32
    args = ModelArgs(family="qwen2", vocab_size=512, hidden_size=a.hidden, intermediate_size=3 * a.hidden,
                     num_hidden_layers=a.layers, num_attention_heads=heads, num_key_value_heads=max(heads // 2, 1),
                     head_dim=32, max_position_embeddings=2048)  # no EOS: every request runs its full length
    tmp = Path(tempfile.mkdtemp(prefix="bench_engine_"))
    model = CausalLM(args)
    save_pretrained(model, tmp)
    n_params = sum(p.numel() for p in model.parameters())
    scale = 4 if a.quick else 1
    n = a.requests // scale
    prompts = [rng.integers(2, 512, int(k)).tolist() for k in rng.integers(16, 48, n)]
    tail = long_tail_lengths(n, rng, a.median, a.sigma, a.cap)
    rows = [("long-tail", 32, n, tail), ("task lengths", 32, n, task_lengths(n, a.seed))]
    rows += [("long-tail", 1, max(n // 16, 4), tail), ("long-tail", 8, n // 4, tail), ("long-tail", 64, n, tail)]
    print(f"model: qwen2 hidden={a.hidden} layers={a.layers} ({n_params / 1e6:.2f}M params), "
          f"torch threads={torch.get_num_threads()}")
    print(f"long-tail lengths: median={np.median(tail):.0f} mean={np.mean(tail):.1f} p99={np.percentile(tail, 99):.0f} "
          f"max={max(tail)}")
    print(f"{'workload':<14}{'batch':>6}{'reqs':>6}{'engine tok/s':>14}{'generate tok/s':>16}{'ratio':>8}")
    for name, batch, count, lengths in rows:
        ps, ls = prompts[:count], lengths[:count]
        te, ne = bench_engine(tmp, ps, ls, batch)
        tg, ng = bench_generate(tmp, ps, ls, batch)
        assert ne == ng == sum(ls)
        print(f"{name:<14}{batch:>6}{count:>6}{ne / te:>14.0f}{ng / tg:>16.0f}{(ne / te) / (ng / tg):>7.2f}x", flush=True)


if __name__ == "__main__":
    main()
