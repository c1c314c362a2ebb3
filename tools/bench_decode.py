"""The embedded engine's decode step against the memory-bandwidth floor and transformers, one run.

    python tools/bench_engine.py --device cuda      # the same: Qwen2.5-7B shape, bf16, 1/64/256
    python tools/bench_decode.py --device cuda --shape qwen2.5-7b --batches 1,64,256
    python tools/bench_decode.py --shape tiny --batches 1,4 --steps 4    # CPU, seconds

Per batch size B: B requests of a `--prompt`-token prompt (random weights of the shape, random
tokens; EOS ignored) are prefilled, then `--steps` decode steps are timed after `--warmup` ones
(which capture the graphs), once with decode graphs (CUDA graphs on a GPU; on CPU the same path
run eagerly) and once without. References measured in the same run:
- the floor: the bytes a decode step must read (every weight once, every sequence's K/V) over
  the device's memory bandwidth (`--hbm-gbps`, or the data sheet's figure for a known GPU);
- transformers' `generate` on the same weights, a static batch of B: (time for 1 + S new tokens
  minus time for 1) / S.
`capture s` is the time spent capturing the graphs the timed steps used: what a shift up, which
drops the graphs with the weights' storage, pays again for the batch sizes it meets. `host ms` is
the engine's own bookkeeping per decode step (scheduling, the step input, sampling, per-sequence
updates), timed with the model runner returning the last logits it computed: serialized with the
device's work (the sampler waits for the logits), so the graphed step cannot beat it.
Ends with the goals of issue 45 (batch 64 within 2x the floor, batch 1 within 3x, batch 256
tokens/s at least 5x the eager engine's), each met or missed. Regime beside every figure: shape,
dtype, device, prompt length.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pivot.engine import Engine, EngineConfig, Request, SamplingParams  # noqa: E402
from pivot.model import CausalLM, ModelArgs  # noqa: E402
from pivot.model.meta_init import materialize, params_on_meta  # noqa: E402

# (hidden, intermediate, layers, heads, KV heads, vocab, tied): the hub's config.json of each
SHAPES = {
    "qwen2.5-72b": (8192, 29568, 80, 64, 8, 152064, False),
    "qwen2.5-32b": (5120, 27648, 64, 40, 8, 152064, False),
    "qwen2.5-7b": (3584, 18944, 28, 28, 4, 152064, False),
    "qwen2.5-1.5b": (1536, 8960, 28, 12, 2, 151936, True),
    "qwen2.5-0.5b": (896, 4864, 24, 14, 2, 151936, True),
    "tiny": (128, 256, 2, 4, 2, 512, False),
}
# HBM bandwidth of each GPU's data sheet, GB/s, by the words of its CUDA name (torch's
# `get_device_name`, e.g. "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA A100-SXM4-40GB"):
# the first entry whose words are all in the name wins, so a part's PCIe and NVL variants come
# before its SXM one. 0: a part with several memory configurations under one name (unknown).
HBM_GBPS: tuple[tuple[tuple[str, ...], float], ...] = (
    (("GH200",), 0.0),  # 96 GB HBM3 (4,000) or 144 GB HBM3e (4,900)
    (("H200",), 4800),  # SXM and NVL alike
    (("H100", "PCIE"), 2000),
    (("H100", "NVL"), 3900),
    (("H100",), 3350),
    (("H800", "PCIE"), 2000),
    (("H800",), 3350),
    (("H20",), 4000),
    (("A100", "40GB"), 1555),  # SXM4 and PCIe alike
    (("A100", "PCIE"), 1935),  # 80 GB
    (("A100", "SXM"), 2039),  # 80 GB
    (("B200",), 8000),
)


def hbm_gbps(device_name: str, given: float = 0.0) -> float:
    """`given`, else the data sheet's bandwidth of the GPU named, else 0 (unknown)."""
    words = device_name.upper().replace("-", " ").split()
    found = (gbps for keys, gbps in HBM_GBPS if all(any(k in w for w in words) for k in keys))
    return given or float(next(found, 0.0))


def qwen2_fields(shape: str) -> dict[str, Any]:
    """ModelArgs fields of a SHAPES entry."""
    hidden, inter, layers, heads, kv, vocab, tied = SHAPES[shape]
    return dict(
        family="qwen2", vocab_size=vocab, hidden_size=hidden, intermediate_size=inter,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
        head_dim=hidden // heads, max_position_embeddings=32768, tie_word_embeddings=tied,
        attention_bias=True, rope_theta=1e6, eos_token_id=0,
    )  # fmt: skip


def model_of(shape: str, dtype: torch.dtype, device: str) -> CausalLM:
    args = ModelArgs(**qwen2_fields(shape))
    with params_on_meta():
        model = CausalLM(args)
    materialize(model, device)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.02)
    return model.to(dtype).eval()


def step_bytes(model: CausalLM, batch: int, ctx: int) -> int:
    """What one decode step must read: each weight once, except the input embedding, of which
    only the batch's rows (all of it when tied: the LM head reads it whole), and each
    sequence's K/V of every layer."""
    a = model.args
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    elem = next(model.parameters()).element_size()
    if not a.tie_word_embeddings:
        table = model.model.embed_tokens.weight
        weights -= (table.shape[0] - min(batch, table.shape[0])) * table.shape[1] * elem
    kv = batch * ctx * a.num_hidden_layers * 2 * a.num_key_value_heads * a.head_dim * elem
    return weights + kv


def sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_engine(
    model: CausalLM, batch: int, a: argparse.Namespace, graphs: str, kernel: str = "gather"
) -> tuple[float, tuple[int, float], float]:
    """(ms per decode step over `a.steps` steps after `a.warmup`, (graphs captured, seconds
    capturing them), host ms per step: the same steps with the model runner's work replaced by
    the last logits it returned, what the engine's bookkeeping costs alone)."""
    prefill_tokens = max(2048, a.prompt)
    # the sequences admitted first decode during the later prefill steps: none may finish inside
    # the timed steps, so each may make one token per prefill step on top of the rest
    prefill_steps = -(-batch * a.prompt // prefill_tokens)
    new = prefill_steps + a.warmup + 2 * a.steps + 3  # the timed steps twice: all, then host
    cfg = EngineConfig(
        kv_capacity_tokens=batch * (a.prompt + new + 16) + 256,
        max_running_seqs=batch,
        max_prefill_tokens=prefill_tokens,
        decode_graphs=graphs,
        attention=kernel,
    )
    engine = Engine(model, cfg, device=a.device)
    g = torch.Generator().manual_seed(0)
    for i in range(batch):
        ids = torch.randint(2, model.args.vocab_size, (a.prompt,), generator=g).tolist()
        engine.add(
            Request(i, ids, SamplingParams(temperature=0, max_new_tokens=new, ignore_eos=True))
        )
    while min(engine.progress().values(), default=0) < 1 or len(engine.progress()) < batch:
        engine.step()  # prefill (the last prefill steps also decode the earliest sequences)
    for _ in range(a.warmup):
        engine.step()
    sync(a.device)
    t0 = time.perf_counter()
    for _ in range(a.steps):
        assert not engine.step()  # nothing finishes inside the timed steps
    sync(a.device)
    ms = (time.perf_counter() - t0) / a.steps * 1e3
    captures = (engine.runner.graphs.captures, engine.runner.graphs.capture_s)
    runner = engine.runner
    logits = runner.run(runner.build_input(engine.scheduler.schedule(), engine.blocks, []))
    runner.run = lambda step: logits  # type: ignore[method-assign]  # bookkeeping alone
    sync(a.device)
    t0 = time.perf_counter()
    for _ in range(a.steps):
        engine.step()
    sync(a.device)
    host_ms = (time.perf_counter() - t0) / a.steps * 1e3
    engine.runner.graphs.clear()  # not `release`: that would free the weights the next run uses
    # the model runner and its decode graphs hold each other (the graphs' forward is a bound
    # method of the runner): dropping the names frees its KV cache only at a cycle collection
    del engine, runner
    gc.collect()
    if a.device.startswith("cuda"):
        torch.cuda.empty_cache()
    return ms, captures, host_ms


def time_generate(model: CausalLM, batch: int, a: argparse.Namespace) -> float | None:
    """transformers' decode ms per token for a static batch, on a copy of the same weights."""
    try:
        import transformers
    except ImportError:
        return None
    m = model.args
    config = transformers.Qwen2Config(
        vocab_size=m.vocab_size, hidden_size=m.hidden_size, intermediate_size=m.intermediate_size,
        num_hidden_layers=m.num_hidden_layers, num_attention_heads=m.num_attention_heads,
        num_key_value_heads=m.num_key_value_heads, tie_word_embeddings=m.tie_word_embeddings,
        rope_theta=m.rope_theta, max_position_embeddings=m.max_position_embeddings,
    )  # fmt: skip
    dtype = next(model.parameters()).dtype
    with torch.device(a.device):  # no dtype keyword: transformers 4.x calls it torch_dtype
        hf = transformers.AutoModelForCausalLM.from_config(config).to(dtype)
    missing, unexpected = hf.load_state_dict(model.state_dict(), strict=False)
    if unexpected or [k for k in missing if k != "lm_head.weight"]:
        raise RuntimeError(f"transformers' Qwen2 names differ: {missing[:3]} {unexpected[:3]}")
    hf.eval()
    ids = torch.randint(2, m.vocab_size, (batch, a.prompt), device=a.device)

    def run(n: int) -> float:
        sync(a.device)
        t0 = time.perf_counter()
        hf.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)
        sync(a.device)
        return time.perf_counter() - t0

    run(2)  # warm-up
    return (run(1 + a.steps) - run(1)) / a.steps * 1e3


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument(
        "--shape",
        choices=sorted(SHAPES),
        default=None,
        help="default: qwen2.5-7b on cuda, tiny on cpu",
    )
    ap.add_argument("--dtype", default=None, help="default: bfloat16 on cuda, float32 on cpu")
    ap.add_argument("--batches", default="1,64,256")
    ap.add_argument("--prompt", type=int, default=256, help="prompt tokens per request")
    ap.add_argument("--steps", type=int, default=32, help="decode steps timed")
    ap.add_argument("--warmup", type=int, default=8, help="decode steps before timing")
    ap.add_argument(
        "--hbm-gbps", type=float, default=0.0, help="memory bandwidth (default: data sheet)"
    )
    ap.add_argument(
        "--kernels",
        default=None,
        help="paged attention kernels timed, the first judged against the goals "
        "(default: flex,gather on cuda, gather on cpu)",
    )
    ap.add_argument("--no-generate", action="store_true", help="skip transformers' reference")
    ap.add_argument("--json", default="", help="also write the rows here")
    a = ap.parse_args(argv)
    cuda = a.device.startswith("cuda")
    a.shape = a.shape or ("qwen2.5-7b" if cuda else "tiny")
    dtype = getattr(torch, a.dtype or ("bfloat16" if cuda else "float32"))
    torch.set_num_threads(1 if not cuda else torch.get_num_threads())
    name = torch.cuda.get_device_name(a.device) if cuda else "CPU"
    gbps = hbm_gbps(name, a.hbm_gbps)
    model = model_of(a.shape, dtype, a.device)
    n_params = sum(p.numel() for p in model.parameters())
    print(
        f"regime: {a.shape} ({n_params / 1e9:.2f} B params), {dtype}, {name}, prompt {a.prompt}, "
        f"{a.steps} timed decode steps after {a.warmup}; floor at {gbps:,.0f} GB/s"
        + ("" if gbps else " (unknown: --hbm-gbps)")
    )
    graphed = "auto" if cuda else "eager"
    kernels = (a.kernels or ("flex,gather" if cuda else "gather")).split(",")
    print(f"{'kernel':>7}{'batch':>6}{'graphs ms':>11}{'eager ms':>10}{'floor ms':>10}{'x floor':>9}"
          f"{'generate ms':>13}{'graphs tok/s':>14}{'eager tok/s':>13}{'graphs':>8}{'capture s':>11}"
          f"{'host ms':>9}")  # fmt: skip
    rows, generated = [], {}
    for kernel in kernels:
        for batch in [int(b) for b in a.batches.split(",")]:
            g_ms, (captured, capture_s), host_ms = time_engine(model, batch, a, graphed, kernel)
            e_ms, _, _ = time_engine(model, batch, a, "off", kernel)
            floor = (
                step_bytes(model, batch, a.prompt + a.warmup + a.steps // 2) / (gbps * 1e9) * 1e3
                if gbps
                else 0.0
            )
            if batch not in generated:  # transformers' reference, once a batch
                generated[batch] = None if a.no_generate else time_generate(model, batch, a)
            hf_ms = generated[batch]
            rows.append(dict(kernel=kernel, batch=batch, graphs_ms=g_ms, eager_ms=e_ms, floor_ms=floor,
                             generate_ms=hf_ms, graphs_captured=captured, capture_s=capture_s,
                             host_ms=host_ms))  # fmt: skip
            print(
                f"{kernel:>7}{batch:>6}{g_ms:>11.2f}{e_ms:>10.2f}{floor:>10.2f}"
                f"{(g_ms / floor if floor else float('nan')):>9.2f}"
                f"{(hf_ms if hf_ms is not None else float('nan')):>13.2f}"
                f"{batch / g_ms * 1e3:>14,.0f}{batch / e_ms * 1e3:>13,.0f}{captured:>8}"
                f"{capture_s:>11.2f}{host_ms:>9.2f}",
                flush=True,
            )
    by = {r["batch"]: r for r in rows if r["kernel"] == kernels[0]}
    goals = [
        ("batch 64 within 2x the floor", 64, lambda r: r["graphs_ms"] <= 2 * r["floor_ms"], True),
        ("batch 1 within 3x the floor", 1, lambda r: r["graphs_ms"] <= 3 * r["floor_ms"], True),
        (
            "batch 256 tokens/s >= 5x eager",
            256,
            lambda r: r["eager_ms"] >= 5 * r["graphs_ms"],
            False,
        ),
    ]
    verdicts = []
    for text, batch, met, needs_floor in goals:
        if batch not in by:
            continue
        if needs_floor and not gbps:
            print(f"goal {text}: not judged (no memory bandwidth for {name}: --hbm-gbps)")
        else:
            verdicts.append(f"{text}: {'met' if met(by[batch]) else 'MISSED'}")
            print(f"goal {verdicts[-1]}")
    steps = ", ".join(
        f"{r['kernel']} b{r['batch']} {r['graphs_ms']:.1f} ms"
        + (f" ({r['graphs_ms'] / r['floor_ms']:.1f}x floor)" if gbps else "")
        for r in rows
    )
    # the one line tools/gpu_check.sh keeps: the tool ran; the goals are figures, not failures
    print(f"PASS decode-step: {a.shape} {dtype}: {steps}; " + "; ".join(verdicts))
    if a.json:
        regime = dict(shape=a.shape, dtype=str(dtype), device=name, prompt=a.prompt, hbm_gbps=gbps)
        Path(a.json).write_text(json.dumps({"regime": regime, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
