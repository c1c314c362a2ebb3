"""Kernel launches and host syncs of one eager decode step, per paper preset role, beside the floor.

    python tools/bench_launches.py                       # every role of every paper preset
    python tools/bench_launches.py --models Qwen2.5-7B,Qwen3-30B-A3B --batches 1,64
    python tools/bench_launches.py --plot runs/launches/launches.png   # + a figure of the table

The embedded engine's eager decode step is bound by the host launching its kernels one by one
(on one H200, a Qwen2.5-7B-shaped step took 69.7 / 71.7 / 86.7 ms at batch 1 / 64 / 256 against
a 3.2-4.1 ms floor, docs/gpu.md). How many it launches depends on the model's structure (layers,
experts touched, attention kinds), not its widths, so this counts them on the CPU through the
engine's own code path: each role's model with the hub's layer count, experts, top-k and layer
kinds but small widths and random weights, a real decode step after `--prompt`-token prompts.

Per model and batch:
- `ops`: aten operators the step dispatches that launch a kernel on a GPU (views, aliases and
  bare allocations left out); the same count for the 7B shape is the reference, measured in the
  same run (`x 7B`);
- `syncs`: Tensor.item / tolist / int / bool calls inside the model's forward, each of which
  waits for the device on a GPU (the sampler's one per step is not counted); a model that syncs
  is never graphed, and `graphs` says whether the engine's decode graphs can take it;
- `floor ms`: the bytes one step must read at the real widths in bf16 (every weight once, of a
  MoE layer only the experts the batch is expected to touch, every sequence's K/V and recurrent
  state) over `--hbm-gbps` (H200: 4,800);
- `eager ms (proj.)`: ops times the time per op of the eager steps one H200 ran, between the
  1.5B shape's 41 ms and the 7B shape's 86.7 ms (batch 256), each over its ops counted here. A
  projection from two measured steps, not a GPU measurement of this model.
A TP replica runs the same operators on every rank plus two all-reduces a layer; counted at TP 1.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_decode import hbm_gbps, qwen2_fields

from configs.presets import PAPER_WORLD, PRESETS
from pivot.engine import Engine, EngineConfig, Request, SamplingParams
from pivot.model import CausalLM, ModelArgs
from pivot.model.meta_init import params_on_meta

# Counting what one eager decode step of the embedded engine launches and syncs.
#
# An aten operator reaching the dispatcher below autograd launches a kernel on a GPU unless it only
# makes a view or alias of its input, or only allocates; in-place operators write, so they count.
# A host sync is a call that reads a tensor's value on the host (item, tolist, int, float, bool),
# counted inside the model's forward only: the engine's own host tensors are not on the device.
ALLOCATIONS = {"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided"}
SYNC_METHODS = ("item", "tolist", "__int__", "__float__", "__bool__", "__index__")


@dataclasses.dataclass
class StepCount:
    ops: int  # kernels the step would launch on a GPU
    syncs: int  # host reads of device values inside the model's forward
    graphs: str  # why the engine's decode graphs never take this model ('' when they can)


def launches(func: torch._ops.OpOverload) -> bool:
    schema = func._schema
    if func._overloadpacket.__name__ in ALLOCATIONS:
        return False
    writes = any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)
    aliases = any(r.alias_info is not None for r in schema.returns)
    return writes or not aliases


class OpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(
        self, func: torch._ops.OpOverload, types: Any, args: Any = (), kwargs: Any = None
    ) -> Any:
        self.ops += launches(func)
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def counting_syncs(module: torch.nn.Module) -> Iterator[list[int]]:
    """While open, counts SYNC_METHODS calls made inside `module`'s forward (counter[0])."""
    counter, inside = [0], [False]
    saved = {name: getattr(torch.Tensor, name) for name in SYNC_METHODS}

    def wrap(method: Any) -> Any:
        def counted(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            counter[0] += inside[0]
            return method(self, *args, **kwargs)

        return counted

    def enter(*_: Any) -> None:
        inside[0] = True

    def leave(*_: Any) -> None:
        inside[0] = False

    hooks = [module.register_forward_pre_hook(enter), module.register_forward_hook(leave)]
    try:
        for name, method in saved.items():
            setattr(torch.Tensor, name, wrap(method))
        yield counter
    finally:
        for name, method in saved.items():
            setattr(torch.Tensor, name, method)
        for hook in hooks:
            hook.remove()


def count_step(args: ModelArgs, batch: int, prompt: int, seed: int = 0) -> StepCount:
    """Prefill `batch` random prompts of `prompt` tokens on CPU, then count one decode step."""
    torch.manual_seed(seed)
    model = CausalLM(args).eval()
    config = EngineConfig(
        kv_capacity_tokens=batch * (prompt + 8) + 256,
        max_running_seqs=batch,
        max_prefill_tokens=max(batch * prompt, 64),
        decode_graphs="off",
    )
    engine = Engine(model, config, device="cpu")
    gen = torch.Generator().manual_seed(seed)
    for i in range(batch):
        ids = torch.randint(1, args.vocab_size, (prompt,), generator=gen).tolist()
        sampling = SamplingParams(temperature=0, max_new_tokens=4, ignore_eos=True)
        engine.add(Request(i, ids, sampling))
    engine.step()  # the prefill, in one step
    assert engine.progress() and min(engine.progress().values()) == 1, "prefill took two steps"
    counter = OpCounter()
    with torch.no_grad(), counting_syncs(model.model) as syncs, counter:
        engine.step()
    return StepCount(counter.ops, syncs[0], engine.runner.graphs.why_not)


QWEN25_SIZES = ("1.5B", "7B", "32B", "72B")
# ModelArgs fields of each model's config.json on the hub (tests/model/fixtures/hub_models.py
# cites where each was read); the Qwen2.5 ones are tools/bench_decode.py's shapes
SHAPES: dict[str, dict[str, Any]] = {
    **{f"Qwen2.5-{size}": qwen2_fields(f"qwen2.5-{size.lower()}") for size in QWEN25_SIZES},
    "GLM-Z1-9B-0414": {
        "family": "glm4", "vocab_size": 151552, "hidden_size": 4096, "intermediate_size": 13696,
        "num_hidden_layers": 40, "num_attention_heads": 32, "num_key_value_heads": 2,
        "head_dim": 128, "partial_rotary_factor": 0.5, "attention_bias": True,
    },
    "Qwen3-30B-A3B": {
        "family": "qwen3_moe", "vocab_size": 151936, "hidden_size": 2048,
        "intermediate_size": 6144, "num_hidden_layers": 48, "num_attention_heads": 32,
        "num_key_value_heads": 4, "head_dim": 128, "qk_norm": True, "num_experts": 128,
        "num_experts_per_tok": 8, "moe_intermediate_size": 768, "norm_topk_prob": True,
    },
    "Qwen3.5-122B-A10B": {
        "family": "qwen3_5_moe", "vocab_size": 248320, "hidden_size": 3072,
        "intermediate_size": 0, "num_hidden_layers": 48, "num_attention_heads": 32,
        "num_key_value_heads": 2, "head_dim": 256, "partial_rotary_factor": 0.25,
        "qk_norm": True, "num_experts": 256, "num_experts_per_tok": 8,
        "moe_intermediate_size": 1024, "shared_expert_intermediate_size": 1024,
        "norm_topk_prob": True, "fused_experts": True,
        "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 12,
        "linear_num_key_heads": 16, "linear_num_value_heads": 64, "linear_key_head_dim": 128,
        "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
    },
}  # fmt: skip
# the widths the launches are counted at: structure kept, sizes a CPU steps through in seconds
SMALL = {
    "vocab_size": 512, "hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "moe_intermediate_size": 32,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
}  # fmt: skip
# eager steps one H200 ran (docs/gpu.md): the fastest (1.5B shape) and the slowest (7B shape at
# batch 256); its HBM bandwidth from the data sheet
H200_7B_MEASURED = {1: 69.7, 64: 71.7, 256: 86.7}  # ms a step by batch, the same H200 run
H200_STEPS_MS = {"Qwen2.5-1.5B": 41.0, "Qwen2.5-7B": H200_7B_MEASURED[256]}
H200_GBPS = hbm_gbps("NVIDIA H200")


def small_args(name: str) -> ModelArgs:
    shape = SHAPES[name]
    small: dict[str, Any] = {k: v for k, v in SMALL.items() if shape.get(k)}
    if shape.get("shared_expert_intermediate_size"):
        small["shared_expert_intermediate_size"] = 48
    return ModelArgs(**{**shape, **small, "max_position_embeddings": 4096, "eos_token_id": 0})


@functools.cache
def param_counts(name: str) -> tuple[int, int]:
    """(parameters in experts, the rest) at the real widths, counted on the meta device."""
    with params_on_meta():
        model = CausalLM(ModelArgs(**SHAPES[name]))
    experts = sum(p.numel() for n, p in model.named_parameters() if ".experts." in n)
    return experts, sum(p.numel() for p in model.parameters()) - experts


@functools.cache
def counted(name: str, batch: int, prompt: int) -> StepCount:
    """One count per model and batch, whether the references or the table ask for it."""
    return count_step(small_args(name), batch, prompt)


def step_bytes(name: str, batch: int, ctx: int) -> float:
    """bf16 bytes one decode step reads at the real widths (see the module docstring)."""
    args = ModelArgs(**SHAPES[name])
    experts, rest = param_counts(name)
    touched = 0.0  # expected share of a layer's experts that a batch's tokens route to
    if args.num_experts:
        touched = 1 - (1 - args.num_experts_per_tok / args.num_experts) ** batch
    full = args.layer_types.count("full_attention") if args.layer_types else args.num_hidden_layers
    kv = batch * ctx * full * 2 * args.num_key_value_heads * args.head_dim
    linear = args.num_hidden_layers - full if args.layer_types else 0
    state = batch * linear * args.linear_num_value_heads * args.linear_key_head_dim
    state *= args.linear_value_head_dim  # recurrent state per sequence, read once a step
    return 2.0 * (rest + experts * touched + kv + state)


def roles() -> list[tuple[str, str, int]]:
    """('preset: role (backend, TP)', model, TP) of every paper preset's rollout and reward."""
    out = []
    for preset, make in PRESETS.items():
        if preset not in PAPER_WORLD:  # the tiny presets run no paper roles
            continue
        cfg = make()
        for role, path, section in (
            ("rollout", cfg.model.policy, cfg.rollout),
            ("reward", cfg.model.genrm, cfg.reward),
        ):
            label = f"{preset}: {role} ({section.engine.backend}, TP {section.tp})"
            out.append((label, Path(path).name, section.tp))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--models", default=",".join(SHAPES), help="comma-separated SHAPES keys")
    ap.add_argument("--batches", default="1,64,256")
    ap.add_argument("--prompt", type=int, default=32, help="prompt tokens of the counted step")
    ap.add_argument("--context", type=int, default=1024, help="tokens of K/V in the floor")
    ap.add_argument("--hbm-gbps", type=float, default=H200_GBPS)
    ap.add_argument("--plot", default="", help="PNG: each model's projected step and its floor")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    names = [n for n in a.models.split(",") if n]
    if unknown := sorted(set(names) - set(SHAPES)):
        ap.error(f"unknown model {unknown[0]!r}: one of {', '.join(SHAPES)}")
    batches = [int(b) for b in a.batches.split(",")]
    ref = {n: counted(n, batches[0], a.prompt).ops for n in H200_STEPS_MS}
    per_op = sorted(H200_STEPS_MS[n] / ref[n] for n in ref)  # ms an op: fastest, slowest step
    print(
        "regime: eager decode steps of the embedded engine (decode graphs off), TP 1, counted on "
        f"the CPU at small widths after {a.prompt}-token prompts; floor in bf16 at the real "
        f"widths, {a.context} tokens of context, {a.hbm_gbps:,.0f} GB/s; references counted in "
        "this run: " + ", ".join(f"{n} {ref[n]:,} ops" for n in ref) + f", so "
        f"{per_op[0] * 1e3:.0f}-{per_op[-1] * 1e3:.0f} us an op in the H200's measured eager steps"
    )
    print(
        f"{'model':<20} {'batch':>5} {'ops':>8} {'x 7B':>6} {'syncs':>5} {'graphs':<26} "
        f"{'floor ms':>9} {'eager ms (proj.)':>17} {'x floor':>8}"
    )
    low_x: dict[tuple[str, int], float] = {}  # the projection's low end over the TP 1 floor
    steps: dict[tuple[str, int], tuple[float, float, float]] = {}  # (floor, low, high) ms
    for name in names:
        for batch in batches:
            got = counted(name, batch, a.prompt)
            floor = step_bytes(name, batch, a.context) / (a.hbm_gbps * 1e9) * 1e3
            lo, hi = got.ops * per_op[0], got.ops * per_op[-1]
            low_x[name, batch] = lo / floor
            steps[name, batch] = (floor, lo, hi)
            print(
                f"{name:<20} {batch:>5} {got.ops:>8,} {got.ops / ref['Qwen2.5-7B']:>6.1f} "
                f"{got.syncs:>5} {got.graphs or 'yes':<26.26} {floor:>9.2f} "
                f"{f'{lo:,.0f}-{hi:,.0f}':>17} {lo / floor:>8.0f}",
                flush=True,
            )
    print("(x floor: the projection's low end over the floor)")
    print(
        "\nthe paper presets' roles (configs/presets.py), and the embedded engine's eager step "
        f"there: x its TP rank's floor (a rank reads 1/TP of the bytes), batch {a.batches}"
    )
    for role, model, tp in roles():
        xs = [low_x.get((model, b)) for b in batches]
        shown = "/".join(f"{x * tp:.0f}" if x else "-" for x in xs)
        print(f"  {role:<58} {model:<20} x{shown}")
    if a.plot:
        plot(steps, names, batches, a.plot)


def plot(
    steps: dict[tuple[str, int], tuple[float, float, float]],
    names: list[str],
    batches: list[int],
    path: str,
) -> None:
    """One panel per batch: each model's floor (dot) and projected eager step (bar, low to high)
    on a log axis, so the distance between them reads at a glance."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(
        1, len(batches), figsize=(4.5 * len(batches), 0.5 * len(names) + 1.5), squeeze=False
    )
    panels = list(axes.flat)
    for ax, batch in zip(panels, batches):
        rows = range(len(names))
        floor, lo, hi = zip(*(steps[n, batch] for n in names))
        ax.barh(rows, [h - low for h, low in zip(hi, lo)], left=lo, color="tab:red", alpha=0.6,
                label="eager step, projected")  # fmt: skip
        ax.scatter(floor, rows, color="black", zorder=3, label="HBM floor (bf16, TP 1)")
        if batch in H200_7B_MEASURED and "Qwen2.5-7B" in names:
            ax.scatter([H200_7B_MEASURED[batch]], [names.index("Qwen2.5-7B")], marker="x",
                       color="tab:blue", zorder=4, label="measured on one H200")  # fmt: skip
        ax.set_xscale("log")
        ax.set_yticks(list(rows), names if ax is panels[0] else [])
        ax.invert_yaxis()
        ax.set_xlabel("ms a decode step")
        ax.set_title(f"batch {batch}")
    handles, labels = panels[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8)
    fig.suptitle("Embedded engine, eager: projected step vs the floor (tools/bench_launches.py)")
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
