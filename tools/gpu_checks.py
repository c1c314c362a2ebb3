"""The checks `tools/gpu_check.sh` runs, one subcommand each. Every check prints one line per
result, `PASS <name>: <figure>`, `FAIL <name>: <why>` or `SKIP <name>: <why>`, and exits 1 on any
FAIL. Without CUDA a GPU check prints `SKIP <name>: no CUDA` and exits 0; a check whose library
(flash-attn, transformer-engine, sglang, vllm, transformers) is not installed is a SKIP line naming it,
and the other checks still run. Nothing is installed. `job` only reads a finished main job's run
folder and works anywhere.

    python tools/gpu_checks.py engine   # embedded engine on a random Qwen2.5-0.5B-shaped model:
                                        # SDPA, flash-attn, flash-attn + transformer-engine linears
    python tools/gpu_checks.py sglang   # an sglang replica vs the embedded engine (greedy tokens),
                                        # abort + release / resume + GPS weight update, GPS Read GB/s
    python tools/gpu_checks.py vllm     # the same for a vLLM replica (sleep level 2 / wake up)
    python tools/gpu_checks.py train    # FSDP2 bf16 train steps, shift down / up bit-exact, then
                                        # train-pace for the Qwen2.5-1.5B and 7B shapes
    python tools/gpu_checks.py train-pace  # a packed training micro-batch of the 7B preset's
                                        # lengths at hub shapes: real tokens/s, MFU, peak memory
    python tools/gpu_checks.py numerics # the embedded engine in bf16 at 4,096 positions per family
                                        # against transformers fp32, beside transformers' own bf16
                                        # error, and the engine against the trainer's forward
    python tools/gpu_checks.py job DIR --steps N --name NAME   # a main job's records: steps, shifts
"""

from __future__ import annotations

import argparse
import importlib
import json
import random
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pivot.engine import Engine, EngineConfig, Request, SamplingParams
from pivot.model import CausalLM, ModelArgs

# The result lines: `PASS <name>: <figure>`, `FAIL <name>: <why>` or `SKIP <name>: <why>`, one per
# result; `FAILED` names the failed ones (the tool exits 1 on any).
FAILED: list[str] = []


def missing(*modules: str) -> str:
    """'' when every module imports, else which one does not and why (for a SKIP line)."""
    import importlib

    for module in modules:
        try:
            importlib.import_module(module)
        except Exception as e:  # not installed, or built against another torch / CUDA
            return f"{module} is not usable ({type(e).__name__}: {str(e).splitlines()[0][:160] if str(e) else ''})"
    return ""


def skip(name: str, why: str) -> None:
    print(f"SKIP {name}: {why}", flush=True)


def report(ok: bool, name: str, text: str) -> None:
    print(f"{'PASS' if ok else 'FAIL'} {name}: {text}", flush=True)
    if not ok:
        FAILED.append(name)


def guarded(name: str, fn: Callable[[], str]) -> None:
    """Run one check; its figure on success, the exception on failure."""
    try:
        report(True, name, fn())
    except Exception as e:  # a failed check is a FAIL line, the others still run
        report(False, name, f"{type(e).__name__}: {e}".splitlines()[0][:300])


# The random models and greedy generations the checks measure with: Qwen2.5-0.5B's shape and a small
# one (random weights: nothing is downloaded), random prompts, greedy tokens and their throughput on
# an engine, and the small model written to disk as transformers does.
QWEN25_05B = dict(
    family="qwen2",
    vocab_size=151936,
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    head_dim=64,
    max_position_embeddings=32768,
    tie_word_embeddings=True,
)
"""Qwen2.5-0.5B's shape (random weights: nothing is downloaded)."""
SMALL = dict(
    QWEN25_05B,
    vocab_size=4096,
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
)
"""A small random model for the sglang and training checks (written to disk by transformers)."""


def prompts(n: int, length: int, vocab: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(2, vocab) for _ in range(length)] for _ in range(n)]


def generate(
    engine: object, batch: list[list[int]], new_tokens: int, first_id: int = 0
) -> tuple[list[list[int]], float]:
    """Greedy generations of `batch` (ids first_id..) and generated tokens per second."""
    for i, p in enumerate(batch):
        engine.add(
            Request(
                first_id + i,
                p,
                SamplingParams(temperature=0, max_new_tokens=new_tokens, ignore_eos=True),
            )
        )
    done: dict[int, list[int]] = {}
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    while engine.has_work():
        for out in engine.step():
            done[out.id] = out.output_ids
    torch.cuda.synchronize()
    tokens = [done[first_id + i] for i in range(len(batch))]
    return tokens, sum(map(len, tokens)) / (time.perf_counter() - t0)


def agreement(a: list[list[int]], b: list[list[int]]) -> float:
    """Fraction of sequences whose greedy tokens are equal."""
    return sum(x == y for x, y in zip(a, b)) / max(len(a), 1)


def small_folder(path: Path) -> Path:
    """A random small qwen2 written by transformers (what sglang's loader expects), sharp logits."""
    import transformers

    torch.manual_seed(0)
    s = SMALL
    model = transformers.Qwen2ForCausalLM(
        transformers.Qwen2Config(
            vocab_size=s["vocab_size"],
            hidden_size=s["hidden_size"],
            intermediate_size=s["intermediate_size"],
            num_hidden_layers=s["num_hidden_layers"],
            num_attention_heads=s["num_attention_heads"],
            num_key_value_heads=s["num_key_value_heads"],
            max_position_embeddings=4096,
            tie_word_embeddings=True,
        )
    )
    with torch.no_grad():  # clear greedy winners, so bf16 kernels of two engines agree
        model.model.embed_tokens.weight.mul_(8.0)
    model.save_pretrained(path)
    return path


# The `sglang` and `vllm` checks: a production engine's replica against the embedded engine (greedy
# tokens), abort + release / resume + GPS weight update, and the GPS Read's GB/s. The two engines
# run the same protocol; only how a replica is built differs. Each check's adapter (module, class)
# and the options its engine takes here, built directly rather than through `build_engine`: sglang
# gets a fixed share of the GPU it shares with the embedded reference, and vLLM is told its
# platform. Imported only when its check runs.
REPLICAS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "sglang": (
        "pivot.engine.backends.sglang_adapter",
        "SglangEngine",
        {"mem_fraction_static": 0.3},
    ),
    "vllm": ("pivot.engine.backends.vllm_adapter", "VllmEngine", {"device": "cuda"}),
}


def build_replica(backend: str, folder: Path) -> Any:
    """A TP 1 replica of `backend` on the current device, on dummy weights until the first load."""
    config = EngineConfig(kv_capacity_tokens=16384, max_running_seqs=16)
    device = torch.cuda.current_device()
    module, name, options = REPLICAS[backend]
    adapter = getattr(importlib.import_module(module), name)
    return adapter.from_pretrained(
        folder, config, tp_size=1, base_gpu_id=device, dtype="bfloat16", **options
    )


def check_production(a: argparse.Namespace) -> None:
    """`a.check` names the engine: 'sglang' or 'vllm'."""
    import torch.distributed as dist

    from pivot.gps.layout import parallel_layout, replicated_layout
    from pivot.gps.store import GPSStore, HostInfo
    from pivot.gps.torch_specs import specs_from_checkpoint
    from pivot.model import load_state_dict

    backend = a.check
    if missing(backend, "transformers"):
        for name in ("gps-read", f"{backend}-greedy", f"{backend}-shift"):
            skip(name, missing(backend, "transformers"))
        return
    folder = small_folder(Path(tempfile.mkdtemp(prefix=f"gpu_check_{backend}_")))
    batch = prompts(8, 32, SMALL["vocab_size"])
    embedded = Engine.from_pretrained(
        folder, EngineConfig(kv_capacity_tokens=8192), dtype="bfloat16", device="cuda"
    )
    ref, _ = generate(embedded, batch, a.new_tokens)
    del embedded
    torch.cuda.empty_cache()
    specs = specs_from_checkpoint(folder)
    store = GPSStore(
        dist.HashStore(), HostInfo(0, 0, 0, (0,)), namespace="gpuchk" + uuid.uuid4().hex[:8]
    )
    state: dict[str, torch.Tensor] = {}
    try:
        store.register(replicated_layout("genrm", specs, [0]))
        full = parallel_layout("genrm", specs, [0], [0])
        store.write("genrm", full, load_state_dict(folder))

        def gps_read() -> str:
            store.read("genrm", full, device="cuda")  # warm-up: plan, pages
            t0 = time.perf_counter()
            got, _ = store.read("genrm", full, device="cuda")
            dt = time.perf_counter() - t0
            n = sum(t.numel() * t.element_size() for t in got.values())
            state.update(store.read("genrm", full, device="cpu")[0])
            pinned = store.buffers["genrm"]._pinned
            return f"{n / dt / 1e9:.1f} GB/s pinned host -> GPU ({n / 1e6:.0f} MB, pinned={pinned})"

        guarded("gps-read", gps_read)
        eng = build_replica(backend, folder)

        def greedy() -> str:
            eng.load_weights(
                state, version=1
            )  # dummy-loaded engine: the GPS copy is the only source
            tokens, tps = generate(eng, batch, a.new_tokens)
            if tokens != ref:
                raise AssertionError(
                    f"greedy tokens equal on {agreement(tokens, ref):.0%} of sequences only"
                )
            return f"greedy tokens equal to the embedded engine's on {len(batch)} sequences ({tps:,.0f} tokens/s)"

        guarded(f"{backend}-greedy", greedy)

        def shift() -> str:
            for i, p in enumerate(batch):
                eng.add(
                    Request(
                        100 + i,
                        p,
                        SamplingParams(temperature=0, max_new_tokens=a.new_tokens, ignore_eos=True),
                    )
                )
            while min(eng.progress().values(), default=0) < 4:
                eng.step()
            partials = eng.release()  # shift down: abort + release
            kept = sum(len(p.output_ids) for p in partials)
            t0 = time.perf_counter()
            eng.resume()  # shift up: resume + the GPS Read pushed in
            got, version = store.read("genrm", full, device="cpu")
            eng.load_weights(got, version + 1)
            up_s = time.perf_counter() - t0
            for p in partials:
                eng.add(p)  # migration back: re-prefill prompt + kept tokens
            done: dict[int, list[int]] = {}
            while eng.has_work():
                done.update({o.id: o.output_ids for o in eng.step()})
            resumed = [done[100 + i] for i in range(len(batch))]
            if resumed != ref:
                raise AssertionError(
                    f"resumed greedy tokens equal on {agreement(resumed, ref):.0%} of sequences only"
                )
            return (
                f"shift up {up_s:.2f} s (resume + GPS Read + weight update); {len(partials)} "
                f"partials kept {kept} tokens and resumed to the reference tokens"
            )

        guarded(f"{backend}-shift", shift)
        eng.shutdown()
    finally:
        store.close()


# ---- engine --------------------------------------------------------------------------------
def check_engine(a: argparse.Namespace) -> None:
    args = ModelArgs(**QWEN25_05B)
    torch.manual_seed(0)
    with torch.device("cuda"):
        state = {k: v.to(torch.bfloat16) for k, v in CausalLM(args).state_dict().items()}
    batch = prompts(a.seqs, a.prompt_tokens, args.vocab_size)
    cfg = EngineConfig(
        kv_capacity_tokens=a.seqs * (a.prompt_tokens + a.new_tokens + 512), max_running_seqs=a.seqs
    )
    ref: dict[str, object] = {}
    # (check, model attention, linear, paged kernel): the gather reference first, whose tokens
    # and speed the others are read against
    variants = (
        ("engine-sdpa-gather", "sdpa", "torch", "gather"),
        ("engine-sdpa-flex", "sdpa", "torch", "flex"),
        ("engine-flash-torch", "flash", "torch", "flash"),
        ("engine-flash-te", "flash", "te", "flash"),
    )
    for name, attention, linear, kernel in variants:
        needs = (("flash_attn",) if attention == "flash" else ()) + (
            ("transformer_engine.pytorch",) if linear == "te" else ()
        )
        if missing(*needs):
            skip(name, missing(*needs))
            continue

        def run(attention: str = attention, linear: str = linear, kernel: str = kernel) -> str:
            with torch.device("cuda"):
                model = CausalLM(args, linear=linear).to(torch.bfloat16)
            model.load_state_dict(state, strict=False)  # TE linears add only `_extra_state`
            engine = Engine(
                model, replace(cfg, attention=kernel), attention=attention, device="cuda"
            )
            generate(engine, batch[:2], 4, first_id=10_000)  # warm-up
            tokens, tps = generate(engine, batch, a.new_tokens)
            if any(len(t) != a.new_tokens for t in tokens):
                raise RuntimeError("a sequence stopped early")
            ref.setdefault("tokens", tokens)
            ref.setdefault("tps", tps)
            return (
                f"{tps:,.0f} tokens/s ({tps / ref['tps']:.2f}x gather; {a.seqs} seqs x "
                f"{a.new_tokens} new tokens, bf16), "
                f"greedy equal to gather's on {agreement(tokens, ref['tokens']):.0%} of sequences"
            )

        guarded(name, run)
        torch.cuda.empty_cache()


# ---- training ------------------------------------------------------------------------------
def check_train(a: argparse.Namespace) -> None:
    """One NCCL rank: the trainer's FSDP2 mesh over a real NCCL group, bf16 compute."""
    import torch.distributed as dist

    from pivot.config import TrainConfig
    from pivot.rl.batch import TrainBatch
    from pivot.roles.trainer import Trainer

    if not dist.is_initialized():
        torch.cuda.set_device(0)
        dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1)
    group, steps = dist.new_group([0]), a.steps

    def run() -> str:
        torch.manual_seed(0)
        trainer = Trainer(
            CausalLM(ModelArgs(**SMALL)),
            group,
            TrainConfig(lr=1e-4, micro_batch_tokens=4096),
            device="cuda:0",
            compute_dtype=torch.bfloat16,
        )
        rng = random.Random(0)
        batch = TrainBatch(
            prompts(16, 64, SMALL["vocab_size"]),
            prompts(16, 192, SMALL["vocab_size"], seed=1),
            [rng.uniform(-1, 1) for _ in range(16)],
        )
        t0, losses = time.perf_counter(), []
        for _ in range(steps):
            m = trainer.train_step(batch)
            if m.skipped:
                raise RuntimeError(f"step skipped (loss {m.loss}, grad norm {m.grad_norm})")
            losses.append(m.loss)
        step_s = (time.perf_counter() - t0) / steps
        before = {k: v.clone() for k, v in trainer.full_state_dict().items()}
        trainer.shift_down()
        trainer.shift_up()
        if any(not torch.equal(before[k], v) for k, v in trainer.full_state_dict().items()):
            raise AssertionError("weights changed across shift down / up")
        return (
            f"{steps} steps, {16 * 256 / step_s:,.0f} tokens/s, losses {', '.join(f'{x:.4f}' for x in losses)}; "
            f"shift down/up bit-exact"
        )

    guarded("fsdp-bf16", run)
    dist.destroy_process_group()
    torch.cuda.empty_cache()
    if a.pace_models:
        check_train_pace(
            # 2 timed micro-batches a model after the warm-up one: the check's time limit holds
            # flex's compile and two 65K-token micro-batches of the 7B shape
            argparse.Namespace(**{**PACE_DEFAULTS, "models": a.pace_models, "steps": 2})
        )


# The pace of one training micro-batch at the hub's shapes: the trainer's forward and backward
# (pivot/rl/logprobs.py: rows packed end to end, the LM head a chunk at a time; every layer
# checkpointed, as train.activation_checkpointing does) on one GPU, random bf16 weights and bf16
# gradients. No FSDP and no optimizer: a 7B model's fp32 master and AdamW state alone (91 GB) do
# not fit one 80 GB device, and on one rank FSDP adds only the casts. The micro-batch is rank 0's
# first of the 7B preset's first drawn step at the preset's budget (tools/bench_train.py: the
# simulator's lengths, the preset's share of its paper world, the memory plan's budget), so its
# rows are as uneven as training's.
BF16_PEAK_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12}
"""Dense bf16 tensor-core FLOP/s of each GPU's data sheet (SXM; no sparsity): MFU's denominator."""
PACE_DEFAULTS: dict[str, Any] = {
    "models": "Qwen2.5-1.5B,Qwen2.5-7B",
    "steps": 3,
    "layers": 0,
    "budget": 0,
    "chunk": 0,
    "preset": "qwen2.5-7b+qwen3-30b-a3b",
    "device": "cuda",
    "small": False,
}


def bf16_peak(device_name: str) -> float | None:
    return next((v for k, v in BF16_PEAK_FLOPS.items() if k in device_name), None)


def check_train_pace(a: argparse.Namespace) -> None:
    """`train-pace-<model>` lines: real tokens/s, MFU (useful FLOPs a second over the GPU's bf16
    peak; useful as tools/bench_train.py counts them: 6 x the layers' weights a real token, the
    LM head at response tokens, causal attention) and peak allocated memory over `a.steps`
    micro-batches after a warm-up one. `--device cpu --small` runs the same path on the CPU at
    bench_launches' small widths, so it cannot rot unseen (no MFU, no peak there)."""
    import dataclasses
    import gc

    sys.path.insert(0, str(ROOT / "tools"))
    from bench_launches import small_args
    from bench_train import (
        model_args,
        preset_budget,
        preset_workload,
        step_rows,
        train_devices,
        useful_flops,
    )
    from torch.distributed._composable import checkpoint

    from configs.presets import get_preset
    from pivot.model.meta_init import materialize, params_on_meta
    from pivot.model.varlen import varlen_kernel
    from pivot.rl.logprobs import plan_micro_batches, response_logprobs

    cfg = get_preset(a.preset)
    budget = a.budget or preset_budget(a.preset, cfg)[0]
    chunk = a.chunk or cfg.train.logprob_chunk_tokens
    devices, _ = train_devices(a.preset, cfg, 0)
    drawn = step_rows(preset_workload(cfg), 0, 0)
    lengths = [p + r for p, r in drawn]
    rows = [drawn[i] for i in plan_micro_batches(lengths, devices, budget)[0][0]]
    real, response = sum(p + r for p, r in rows), sum(r for _, r in rows)
    device = torch.device(a.device)
    cuda = device.type == "cuda"
    attention = "flash" if cuda and not missing("flash_attn") else "sdpa"
    kernel = varlen_kernel(attention, device)
    gpu = torch.cuda.get_device_name(device) if cuda else "CPU"
    peak_flops = bf16_peak(gpu) if cuda else None

    def pace(name: str, layers: int) -> tuple[float, float, int, float]:
        """(seconds a micro-batch, useful FLOPs of one, layers, peak GB) at `layers` layers."""
        args = small_args(name) if a.small else model_args(name)
        args = dataclasses.replace(args, num_hidden_layers=layers)
        with params_on_meta():
            model = CausalLM(args, attention=attention).to(torch.bfloat16)
        materialize(model, device)
        torch.manual_seed(0)
        with torch.no_grad():
            for p in model.parameters():
                p.normal_(0.0, 0.02)
        for layer in model.model.layers:  # as pivot/roles/parallelize.py does
            checkpoint(layer)
        rng = random.Random(0)
        prompt_ids = [[rng.randrange(args.vocab_size) for _ in range(p)] for p, _ in rows]
        responses = [[rng.randrange(args.vocab_size) for _ in range(r)] for _, r in rows]

        def micro_batch() -> None:
            lp, mask = response_logprobs(model, prompt_ids, responses, 1.0, device, chunk)
            (lp * mask).sum().backward()  # gradients accumulate, as over a step's micro-batches

        micro_batch()  # warm-up: flex compiles, the gradients are allocated
        if cuda:
            torch.cuda.synchronize(device)
            torch.cuda.reset_peak_memory_stats(device)
        t0 = time.perf_counter()
        for _ in range(a.steps):
            micro_batch()
        if cuda:
            torch.cuda.synchronize(device)
        seconds = (time.perf_counter() - t0) / a.steps
        peak = torch.cuda.max_memory_allocated(device) / 1e9 if cuda else float("nan")
        useful, _ = useful_flops(model, rows)
        return seconds, useful, layers, peak

    for name in [n for n in a.models.split(",") if n]:

        def run(name: str = name) -> str:
            hub = (small_args(name) if a.small else model_args(name)).num_hidden_layers
            layers = a.layers or hub
            while True:  # a model too big for the device runs with half its layers, and says so
                try:
                    seconds, useful, layers, peak = pace(name, layers)
                    break
                except torch.cuda.OutOfMemoryError:
                    if layers == 1:
                        raise
                layers //= 2  # out of the handler: its traceback no longer holds the model
                gc.collect()
                torch.cuda.empty_cache()
            mfu = (
                f"MFU {useful / seconds / peak_flops:.1%} of {gpu}'s {peak_flops / 1e12:,.0f} TF/s bf16"
                if peak_flops
                else f"MFU n/a (no bf16 peak known for {gpu})"
            )
            memory = f"peak {peak:.1f} GB allocated" if cuda else "peak n/a on CPU"
            return (
                f"{layers}/{hub} layers{' (small widths)' if a.small else ''}, {kernel} attention, "
                f"{len(rows)} row{'s' if len(rows) > 1 else ''} = {real:,} real tokens "
                f"({response:,} response; {budget:,}-token budget), {seconds:.3f} s a "
                f"micro-batch (forward + backward, {a.steps} timed): "
                f"{real / seconds:,.0f} real tokens/s, {useful / real / 1e9:.3g} useful GF a token, "
                f"{mfu}; {memory}"
            )

        guarded(f"train-pace-{name}", run)
        if cuda:
            torch.cuda.empty_cache()


# ---- numerics -------------------------------------------------------------------------------
def check_numerics(a: argparse.Namespace) -> None:
    """tests/numerics/test_bf16.py on the GPU: CUDA kernels and decode graphs, not the CPU's
    (`--device cpu` runs the same check here, as the suite does to keep it working)."""
    if missing("transformers"):
        skip("numerics", missing("transformers"))
        return
    import tempfile

    from pivot.engine import Request, SamplingParams
    from pivot.model import from_pretrained
    from pivot.rl.logprobs import response_logprobs
    from tests.numerics.long_models import (
        FAMILIES,
        POSITIONS,
        long_prompt,
        mean_abs,
        reference_logprobs,
        save_long_model,
        transformers_bf16_error,
    )

    root = Path(tempfile.mkdtemp(prefix="pivot-numerics-"))
    cfg = EngineConfig(
        kv_capacity_tokens=POSITIONS + 64, max_running_seqs=1, max_prefill_tokens=1024
    )
    for family in FAMILIES:

        def run(family: str = family) -> str:
            path = root / family
            hf32 = save_long_model(path, family).to(a.device)
            prompt = long_prompt(seed=1)
            engine = Engine.from_pretrained(path, cfg, dtype="bfloat16", device=a.device)
            params = SamplingParams(temperature=0, max_new_tokens=a.new_tokens, ignore_eos=True)
            engine.add(Request(0, prompt, params))
            done: dict = {}
            while engine.has_work():
                done.update({o.id: o for o in engine.step()})
            tokens, served = done[0].output_ids, done[0].output_logprobs
            ref = reference_logprobs(hf32, prompt, tokens)
            noise = transformers_bf16_error(path, family, prompt, tokens, ref, a.device)
            # the trainer's forward under FSDP2 mixed precision: bf16 parameters, fp32 tables
            trainer = from_pretrained(path, dtype=torch.bfloat16, device=a.device).eval()
            with torch.no_grad():
                lp, _ = response_logprobs(trainer, [prompt], [tokens], device=a.device)
            trained = lp[0, : len(tokens)].tolist()
            ratio = mean_abs(served, ref) / noise
            graphs = engine.runner.graphs.replays
            if ratio > 1.5:
                raise AssertionError(f"engine {ratio:.2f}x transformers' bf16 error {noise:.4f}")
            return (
                f"engine ({engine.runner.kernel}) {ratio:.2f}x transformers' bf16 error ({noise:.4f}) at positions "
                f"{POSITIONS}-{POSITIONS + len(tokens) - 1}; engine vs trainer mean |dlogp| "
                f"{mean_abs(served, trained):.4f} ({mean_abs(served, trained) / noise:.2f}x); "
                f"{graphs} graph replays"
            )

        guarded(f"numerics-{family}", run)
        if a.device == "cuda":
            torch.cuda.empty_cache()


# ---- a finished main job --------------------------------------------------------------------
def check_job(a: argparse.Namespace) -> None:
    """A main job's run folder: every step recorded; shift ups with their timings."""

    def run() -> str:
        rows = [
            json.loads(line)
            for line in (Path(a.dir) / "metrics.jsonl").read_text().splitlines()
            if line.strip()
        ]
        events = [
            json.loads(line)
            for line in (Path(a.dir) / "timeline.jsonl").read_text().splitlines()
            if line.strip()
        ]
        ups = [e for e in events if e.get("event") == "shift_up"]
        if len(rows) != a.steps:
            raise AssertionError(f"{len(rows)} steps recorded, expected {a.steps}")
        roles = sorted({e["role"] for e in ups})
        if len(roles) < a.min_roles:
            raise AssertionError(
                f"shift ups of {roles} only, expected at least {a.min_roles} roles"
            )
        slowest = max((e["phases"]["total"] for e in ups), default=0.0)
        return (
            f"{len(rows)} steps, {len(ups)} shift ups ({', '.join(roles)}), slowest {slowest:.2f} s"
        )

    guarded(a.name, run)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="check", required=True)
    eng = sub.add_parser(
        "engine", help="embedded engine throughput: sdpa, flash-attn, transformer-engine"
    )
    eng.add_argument("--seqs", type=int, default=64)
    eng.add_argument("--prompt-tokens", type=int, default=128)
    eng.add_argument("--new-tokens", type=int, default=128)
    sgl = sub.add_parser(
        "sglang", help="sglang replica: greedy vs embedded, abort/release/resume, GPS weight update"
    )
    sgl.add_argument("--new-tokens", type=int, default=24)
    vllm = sub.add_parser(
        "vllm", help="vLLM replica: greedy vs embedded, abort/release/resume, GPS weight update"
    )
    vllm.add_argument("--new-tokens", type=int, default=24)
    num = sub.add_parser(
        "numerics", help="bf16 engine vs transformers fp32 at 4,096 positions, per family"
    )
    num.add_argument("--new-tokens", type=int, default=24)
    num.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    train = sub.add_parser(
        "train", help="FSDP2 bf16 train steps and a shift down/up, then train-pace"
    )
    train.add_argument("--steps", type=int, default=3)
    train.add_argument(
        "--pace-models", default=PACE_DEFAULTS["models"], help="train-pace's ('' for none)"
    )
    pace = sub.add_parser(
        "train-pace",
        help="a packed training micro-batch at hub shapes: real tokens/s, MFU, peak memory",
    )
    pace.add_argument("--models", default=PACE_DEFAULTS["models"], help="bench_launches SHAPES")
    pace.add_argument("--steps", type=int, default=3, help="micro-batches timed")
    pace.add_argument("--layers", type=int, default=0, help="0: the hub's (halved on OOM)")
    pace.add_argument("--budget", type=int, default=0, help="micro-batch tokens (0: preset's)")
    pace.add_argument("--chunk", type=int, default=0, help="logprob_chunk_tokens (0: preset's)")
    pace.add_argument("--preset", default=PACE_DEFAULTS["preset"], help="the lengths' preset")
    pace.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    pace.add_argument("--small", action="store_true", help="bench_launches' small widths")
    job = sub.add_parser("job", help="a finished main job's run folder")
    job.add_argument("dir")
    job.add_argument("--steps", type=int, required=True, help="steps the job was asked for")
    job.add_argument("--name", default="main-job", help="name on the result line")
    job.add_argument(
        "--min-roles", type=int, default=1, help="fewest roles that must have shifted up"
    )
    a = ap.parse_args(argv)
    for name in ("seqs", "prompt_tokens", "new_tokens", "steps"):
        if getattr(a, name, 1) < 1:
            ap.error(f"--{name.replace('_', '-')} {getattr(a, name)}: must be >= 1")
    for name in ("layers", "budget", "chunk"):
        if getattr(a, name, 0) < 0:
            ap.error(f"--{name} {getattr(a, name)}: must be >= 0")
    return a


def main(argv: list[str] | None = None) -> int:
    a = parse_args(argv)
    on_cpu = a.check == "job" or getattr(a, "device", "cuda") == "cpu"
    if not on_cpu and not torch.cuda.is_available():
        print(f"SKIP {a.check}: no CUDA device visible to torch", flush=True)
        return 0
    checks = {"engine": check_engine, "train": check_train, "job": check_job}
    checks["train-pace"] = check_train_pace
    checks["numerics"] = check_numerics
    checks |= dict.fromkeys(REPLICAS, check_production)
    checks[a.check](a)
    return 1 if FAILED else 0


if __name__ == "__main__":
    raise SystemExit(main())
