"""What one training micro-batch computes and holds, packed (the trainer's path) against padded
(the path it replaced, kept as the test oracle tests/rl/padded_reference.py), measured in the
same run.

    python tools/bench_train.py                                  # the 7B preset, 1.5B and 7B shapes
    python tools/bench_train.py --models Qwen2.5-7B --micro-batches 1 --chunk 2048
    python tools/bench_train.py --quick                          # the smoke size (seconds)
    python tools/bench_train.py --json runs/bench_train.json     # + every row

Counted, not timed. Three sections:

1. Padding share, on a preset's length distribution: `--steps` RL steps of its batch
   (train.batch_prompts x train.group_size rows, prompt and response lengths as the simulator
   draws them, pivot/sim/workload.py, capped at the preset's rollout.max_prompt_tokens and
   max_new_tokens) split over its training devices (train.devices, or where that is auto its
   share of the paper's world, configs/presets.py PAPER_WORLD; `--train-devices` overrides),
   planned by `plan_micro_batches` (packed: at most `budget` real tokens a micro-batch) and by
   `padded_plan` (rows while longest x rows <= budget). `computed/real`: tokens a step runs
   over the tokens its rows hold; packed: the rows' own tokens, plus one token for each pass a
   rank with no rows left runs so FSDP's collectives line up (the trainer's dummy pass; padded
   the same); padded: rows x longest of each micro-batch. `mb/step`: micro-batches every rank
   runs (the most any rank has). `busiest/mean`: the busiest rank's computed tokens over the
   mean rank's real tokens (what the step waits for). The budget is the preset's
   train.micro_batch_tokens, or where that is auto (0) the memory plan's on the preset's paper
   devices, as the launcher resolves it (pivot/memory/plan.py: 65,536 for the 7B preset on
   96 GB H20s), beside 32,768 (the 7B preset's before it became auto). The bar: packed <= 1.05
   on the 7B preset's distribution.
2. FLOPs and bytes per real token of forward + backward at the hub's shapes, bf16, on the meta
   device (no memory, no arithmetic): `response_logprobs` (packed) against `padded_logprobs`,
   then a backward of the masked sum, each layer checkpointed as the trainer does
   (train.activation_checkpointing; `--no-checkpointing` to leave it off), gradients
   accumulated over the micro-batches. The micro-batches are rank 0's of the first drawn step
   (section 1's first budget; `--micro-batches N` takes the first N of each plan): a whole
   rank's share, so the padded plan's extra micro-batches count too. FLOPs from
   `torch.utils.flop_counter.FlopCounterMode`, bytes created and read from pivot/engine/traffic.py's
   `TrafficCounter`, every aten operator eager (no fusion: the bytes are the eager path's).
   Attention is counted as a fused causal kernel computes it (flash-attn's varlen kernel, or
   flex with the document mask: the blocks on and below each row's diagonal, nothing across
   rows; its backward makes the scores again, 2.5x the forward's matmuls) and moves it (reads
   Q, K, V, writes O and the log-sum-exp; backward reads those and dO, writes dQ, dK, dV): an
   operator standing in for the kernel carries those contracts, since this CPU's fallback (SDPA
   on each row's slice) would count the slices' gradients and the unfused scores instead.
   `useful`: the model FLOPs the micro-batch needs, 6 x the decoder layers' matmul weights per
   real token + 6 x hidden x vocab per response token (the LM head only where a log-prob is
   asked for) + the causal attention, 6 x layers x heads x head_dim x L(L+1) for a row of L;
   `6N+attn`: the usual MFU numerator, N the layers' matmul weights and the LM head's, the head
   at every token. `MFU ceiling` = useful / computed: what padding, the LM head over prompt
   positions and recompute (checkpointed layers, made again in backward up to their last saved
   tensor, so not the MLP's down projection: torch's non-reentrant checkpoint stops there; the
   head's logits made again in backward; the attention kernel's backward) leave of a GPU's
   FLOPs. Multiply it by the kernels' own efficiency on the GPU for an MFU.
3. Peak memory of a micro-batch of response tokens at Qwen2.5's 152,064 vocabulary on a narrow
   model (hidden 64, 2 layers, 4 query heads on 2 K/V heads of 16, fp32 as on this CPU; rows
   of 64 prompt + 512 response tokens, `--chunk` tokens of logits at a time), forward and
   backward, by `torch.distributed._tools.mem_tracker.MemTracker` (parameters, gradients and
   every live tensor): real at `--real-tokens` (2,048: the padded path's 6.5 GB fits this
   machine), and under `FakeTensorMode` (no memory) at that size, to check fake against real, and
   at `--fake-tokens` (16,384: the padded path would need ~51 GB). The bar: packed <= 1/4 of
   padded at 16K.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_launches import SHAPES

from configs.presets import PAPER_WORLD, get_preset, paper_preset
from pivot.config import PivotConfig
from pivot.engine.traffic import TrafficCounter
from pivot.model import CausalLM, ModelArgs
from pivot.model.meta_init import params_on_meta
from pivot.model.varlen import VarlenAttention
from pivot.rl.logprobs import plan_micro_batches, response_logprobs
from pivot.sim.workload import LengthDist, Workload, step_samples
from tests.rl.padded_reference import padded_logprobs, padded_plan

PRESET = "qwen2.5-7b+qwen3-30b-a3b"
MODELS = ("Qwen2.5-1.5B", "Qwen2.5-7B")
REFERENCE_BUDGET = 32768
"""The 7B preset's train.micro_batch_tokens before it became auto: planned beside the preset's."""
PACKED_BAR, MEMORY_BAR = 1.05, 0.25
PATHS: dict[str, Callable[..., tuple[Tensor, Tensor]]] = {
    "packed": response_logprobs,
    "padded": padded_logprobs,
}
PLANS: dict[str, Callable[[list[int], int, int], list[list[list[int]]]]] = {
    "packed": plan_micro_batches,
    "padded": padded_plan,
}
NARROW = dict(
    family="qwen2", vocab_size=152064, hidden_size=64, intermediate_size=128,
    num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
)  # fmt: skip
"""Section 3's model: Qwen2.5's vocabulary on a width at which the logits are all that weighs."""
ROW_PROMPT, ROW_RESPONSE = 64, 512
"""Section 3's rows."""
GB = 1e9


# ---- 1. padding share ------------------------------------------------------------------------
@dataclass
class PaddingRow:
    preset: str
    plan: str
    budget: int
    train_devices: int
    steps: int
    real_tokens: int
    computed_tokens: int
    micro_batches_per_step: float
    rows_per_micro_batch: float
    busiest_over_mean: float

    @property
    def computed_per_real(self) -> float:
        return self.computed_tokens / self.real_tokens


def preset_workload(cfg: PivotConfig) -> Workload:
    """The simulator's workload for the preset's batch (pivot/sim/autosize.py builds it so), its
    lengths capped where the preset's rollout caps them."""
    w = Workload(prompts_per_step=cfg.train.batch_prompts, group_size=cfg.train.group_size)

    def capped(d: LengthDist, cap: int) -> LengthDist:
        cap = min(d.cap, cap)
        return dataclasses.replace(d, cap=cap, low=min(d.low, cap))

    return dataclasses.replace(
        w,
        prompt=capped(w.prompt, cfg.rollout.max_prompt_tokens),
        response=capped(w.response, cfg.rollout.max_new_tokens),
    )


def train_devices(name: str, cfg: PivotConfig, flag: int) -> tuple[int, str]:
    """The training pool's devices and where the figure comes from."""
    if flag:
        return flag, "--train-devices"
    if isinstance(cfg.train.devices, int) and cfg.train.devices > 0:
        return cfg.train.devices, "the preset's train.devices"
    if name in PAPER_WORLD:
        devices = paper_preset(name).train.devices
        if isinstance(devices, int) and devices > 0:
            return devices, f"the preset's share of its paper world of {PAPER_WORLD[name]}"
    return 8, "the default"


def preset_budget(name: str, cfg: PivotConfig) -> tuple[int, str]:
    """The preset's micro-batch tokens and where the figure comes from: train.micro_batch_tokens,
    or where that is auto (0) the memory plan's budget on the preset's paper devices, as the
    launcher resolves it (pivot/memory/plan.py `fitting_budget`)."""
    if cfg.train.micro_batch_tokens:
        return cfg.train.micro_batch_tokens, "the preset's train.micro_batch_tokens"
    try:
        from pivot.memory.plan import GB, fitting_budget
        from pivot.memory.report import footprint

        paper = paper_preset(name)
        gb = paper.cluster.gpu_memory_gb
        longest = paper.rollout.max_prompt_tokens + paper.rollout.max_new_tokens
        budget = fitting_budget(
            footprint(paper, "policy"), paper.train.pool, paper.train, int(gb * GB), longest
        )
        return budget, f"train.micro_batch_tokens auto: the memory plan's on {gb:g} GB devices"
    except Exception as e:  # the plan cannot be made here: say so, plan at the reference
        return REFERENCE_BUDGET, f"the reference (the memory plan failed: {type(e).__name__})"


def budgets_of(name: str, cfg: PivotConfig, flag: str) -> tuple[list[int], str]:
    if flag:
        return [int(b) for b in flag.split(",") if b], "--budgets"
    budget, source = preset_budget(name, cfg)
    if budget == REFERENCE_BUDGET:
        return [budget], source
    return [budget, REFERENCE_BUDGET], (
        f"{budget:,}: {source}; {REFERENCE_BUDGET:,}: the 7B preset's before it was auto"
    )


def dist(d: LengthDist) -> str:
    return f"lognormal(median {d.median:g}, sigma {d.sigma:g}) <= {d.cap:,}"


def step_rows(w: Workload, seed: int, step: int) -> list[tuple[int, int]]:
    """(prompt, response) tokens of every row of the step."""
    return [(s.prompt_len, s.response_len) for s in step_samples(w, seed, step, 1)]


def computed_tokens(plan: str, rows: list[tuple[int, int]], mb: list[int]) -> int:
    lengths = [rows[i][0] + rows[i][1] for i in mb]
    if not lengths:
        return 1  # the dummy pass of a rank with no rows left
    return sum(lengths) if plan == "packed" else max(lengths) * len(lengths)


def padding_share(
    preset: str, w: Workload, devices: int, budget: int, steps: int, seed: int
) -> list[PaddingRow]:
    out = []
    for plan, planner in PLANS.items():
        real = computed = mbs = micro = busiest = rows_seen = 0
        for step in range(steps):
            rows = step_rows(w, seed, step)
            lengths = [p + r for p, r in rows]
            plans = planner(lengths, devices, budget)
            count = max(len(p) for p in plans)
            per_rank = [
                sum(computed_tokens(plan, rows, mb) for mb in p + [[]] * (count - len(p)))
                for p in plans
            ]
            real += sum(lengths)
            computed += sum(per_rank)
            mbs += count
            micro += sum(len(p) for p in plans)
            busiest += max(per_rank)
            rows_seen += len(rows)
        out.append(
            PaddingRow(
                preset=preset,
                plan=plan,
                budget=budget,
                train_devices=devices,
                steps=steps,
                real_tokens=real,
                computed_tokens=computed,
                micro_batches_per_step=mbs / steps,
                rows_per_micro_batch=rows_seen / micro,
                busiest_over_mean=busiest / (real / devices),
            )
        )
    return out


# ---- 2. FLOPs and bytes ----------------------------------------------------------------------
@functools.cache
def attention_ops() -> tuple[Any, Any]:
    """`bench_train::causal_attention(q, k, v, lengths) -> (out, lse)` and its backward: q
    [B, Hq, T, D], k/v [B, Hkv, T, D], each of the B sequences split along T into rows of
    `lengths`, each row attending causally to itself. Meta and fake tensors only: the operators
    stand for a fused kernel, counted by its contract (module docstring, section 2)."""
    ns = "bench_train"
    if hasattr(torch.ops, ns) and hasattr(getattr(torch.ops, ns), "causal_attention"):
        ops = getattr(torch.ops, ns)
        return ops.causal_attention, ops.causal_attention_backward  # imported twice

    @torch.library.custom_op(f"{ns}::causal_attention", mutates_args=())
    def forward(q: Tensor, k: Tensor, v: Tensor, lengths: list[int]) -> tuple[Tensor, Tensor]:
        raise NotImplementedError("counted on the meta device only")

    @forward.register_fake
    def _(q: Tensor, k: Tensor, v: Tensor, lengths: list[int]) -> tuple[Tensor, Tensor]:
        return torch.empty_like(q), q.new_empty(q.shape[:3], dtype=torch.float32)

    @torch.library.custom_op(f"{ns}::causal_attention_backward", mutates_args=())
    def backward_op(
        grad: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, lengths: list[int]
    ) -> tuple[Tensor, Tensor, Tensor]:
        raise NotImplementedError("counted on the meta device only")

    @backward_op.register_fake
    def _(
        grad: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, lengths: list[int]
    ) -> tuple[Tensor, Tensor, Tensor]:
        return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)

    def setup(ctx: Any, inputs: tuple[Any, ...], output: tuple[Tensor, Tensor]) -> None:
        q, k, v, lengths = inputs
        ctx.save_for_backward(q, k, v, *output)
        ctx.mark_non_differentiable(output[1])
        ctx.lengths = lengths

    def backward(ctx: Any, grad: Tensor, _lse: Tensor) -> tuple[Tensor | None, ...]:
        q, k, v, out, lse = ctx.saved_tensors
        return (*backward_op(grad, q, k, v, out, lse, ctx.lengths), None)

    forward.register_autograd(backward, setup_context=setup)
    ops = getattr(torch.ops, ns)
    return ops.causal_attention, ops.causal_attention_backward


def causal_pairs(lengths: list[int]) -> int:
    """Query-key pairs a causal kernel computes over rows of `lengths` (the diagonal included)."""
    return sum(n * (n + 1) // 2 for n in lengths)


def _attention_flops(q_shape: Any, *rest: Any, out_shape: Any = None, **kwargs: Any) -> int:
    b, h, _, d = q_shape
    return 4 * b * h * d * causal_pairs(rest[-1])  # QK^T and PV, 2 FLOPs a multiply-add


def _attention_backward_flops(grad_shape: Any, q_shape: Any, *rest: Any, **kwargs: Any) -> int:
    b, h, _, d = q_shape
    return 10 * b * h * d * causal_pairs(rest[-1])  # scores again, dV, dP, dQ, dK: 2.5x


def flop_mapping() -> dict[Any, Any]:
    fwd, bwd = attention_ops()
    return {fwd: _attention_flops, bwd: _attention_backward_flops}


@contextlib.contextmanager
def fused_attention() -> Iterator[None]:
    """Both paths' attention through the stand-in of a fused causal kernel: the packed rows'
    (VarlenAttention, one call over the rows a layer) and the padded batch's (SDPA, each row
    of the batch its whole padded length)."""
    fwd, _ = attention_ops()
    varlen_call, sdpa = VarlenAttention.__call__, F.scaled_dot_product_attention

    def packed(self: VarlenAttention, layer_idx: int, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        out, _ = fwd(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), list(self.lengths))
        return out.transpose(1, 2)

    def padded(q: Tensor, k: Tensor, v: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        if args or kwargs.get("attn_mask") is not None or not kwargs.get("is_causal"):
            raise ValueError("only the causal self-attention of the padded path is counted")
        return fwd(q, k, v, [q.shape[2]])[0]

    VarlenAttention.__call__ = packed  # type: ignore[method-assign]
    F.scaled_dot_product_attention = padded
    try:
        yield
    finally:
        VarlenAttention.__call__ = varlen_call  # type: ignore[method-assign]
        F.scaled_dot_product_attention = sdpa


@dataclass
class FlopRow:
    model: str
    path: str
    checkpointing: bool
    micro_batches: int
    rows: int
    real_tokens: int
    response_tokens: int
    computed_tokens: int
    flops: float
    """Counted, attention as a causal kernel computes it."""
    attention_flops: float
    useful_flops: float
    model_flops: float
    """6N + attention: the LM head at every real token."""
    created_bytes: float
    read_bytes: float

    @property
    def mfu_ceiling(self) -> float:
        return self.useful_flops / self.flops

    def per_token(self, x: float) -> float:
        return x / self.real_tokens


def model_args(name: str) -> ModelArgs:
    return ModelArgs(**{**SHAPES[name], "max_position_embeddings": 131072, "eos_token_id": 0})


def useful_flops(model: CausalLM, rows: list[tuple[int, int]]) -> tuple[float, float]:
    """(useful, 6N+attn) FLOPs of forward and backward over (prompt, response) rows: see the
    module docstring (dense models: every layer weight is used by every token)."""
    a = model.args
    layer = sum(p.numel() for p in model.model.layers.parameters() if p.dim() >= 2)
    head = a.hidden_size * a.vocab_size
    attn = 6 * a.num_hidden_layers * a.num_attention_heads * a.head_dim
    real = sum(p + r for p, r in rows)
    attention = attn * 2 * causal_pairs([p + r for p, r in rows])
    useful = 6 * layer * real + 6 * head * sum(r for _, r in rows) + attention
    return float(useful), float(6 * (layer + head) * real + attention)


def meta_model(name: str, checkpointing: bool) -> CausalLM:
    with params_on_meta():
        model = CausalLM(model_args(name)).to(torch.bfloat16)
    if checkpointing:  # as pivot/roles/parallelize.py does, before FSDP
        from torch.distributed._composable import checkpoint

        for layer in model.model.layers:
            checkpoint(layer)
    return model


def count_path(
    name: str,
    model: CausalLM,
    path: str,
    rows: list[tuple[int, int]],
    plan: list[list[int]],
    chunk: int,
    checkpointing: bool,
) -> FlopRow:
    from torch.utils.flop_counter import FlopCounterMode

    model.zero_grad(set_to_none=True)
    fwd, bwd = attention_ops()
    attention_names = {fwd, bwd}
    flops = attention = created = read = 0.0
    for mb in plan:
        prompts = [[1] * rows[i][0] for i in mb]
        responses = [[1] * rows[i][1] for i in mb]
        with (
            fused_attention(),
            FlopCounterMode(display=False, custom_mapping=flop_mapping()) as fc,
            TrafficCounter() as tc,
        ):
            lp, mask = PATHS[path](model, prompts, responses, 1.0, "meta", chunk)
            (lp * mask).sum().backward()
        counts = fc.get_flop_counts()["Global"]
        flops += sum(counts.values())
        attention += sum(v for k, v in counts.items() if k in attention_names)
        created += tc.traffic.created
        read += tc.traffic.read
    model.zero_grad(set_to_none=True)
    picked = [rows[i] for mb in plan for i in mb]
    useful, six_n = useful_flops(model, picked)
    return FlopRow(
        name, path, checkpointing, len(plan), len(picked), sum(p + r for p, r in picked),
        sum(r for _, r in picked), sum(computed_tokens(path, rows, mb) for mb in plan), flops,
        attention, useful, six_n, created, read,
    )  # fmt: skip


# ---- 3. peak memory --------------------------------------------------------------------------
@dataclass
class MemoryRow:
    path: str
    response_tokens: int
    rows: int
    chunk: int
    real_gb: float | None
    fake_gb: float


def peak_gb(path: str, response_tokens: int, chunk: int, fake: bool) -> float:
    """MemTracker's peak (every device's total) over forward and backward of one micro-batch of
    rows of ROW_PROMPT + ROW_RESPONSE tokens on the narrow model, real or under FakeTensorMode."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.mem_tracker import MemTracker

    rows = max(1, response_tokens // ROW_RESPONSE)
    mode = FakeTensorMode() if fake else contextlib.nullcontext()
    with mode:
        torch.manual_seed(0)
        model = CausalLM(ModelArgs(**NARROW))
        prompts, responses = [[1] * ROW_PROMPT] * rows, [[2] * ROW_RESPONSE] * rows
        tracker = MemTracker()
        tracker.track_external(model)
        with tracker:
            lp, mask = PATHS[path](model, prompts, responses, 1.0, "cpu", chunk)
            (lp * mask).sum().backward()
        snapshot = tracker.get_tracker_snapshot("peak")
    del model, lp, mask
    return sum(float(v["Total"]) for v in snapshot.values()) / GB


# ---- the run ---------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--preset", default=PRESET, help="the length distribution and batch")
    ap.add_argument("--steps", type=int, default=20, help="steps drawn for section 1")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--train-devices", type=int, default=0, help="0: the preset's (see above)")
    ap.add_argument("--budgets", default="", help="micro-batch tokens, comma-separated")
    ap.add_argument("--models", default=",".join(MODELS), help="section 2's SHAPES keys")
    ap.add_argument(
        "--micro-batches", type=int, default=0, help="section 2: first N of rank 0's (0: all)"
    )
    ap.add_argument("--no-checkpointing", action="store_true", help="section 2's layers")
    ap.add_argument("--chunk", type=int, default=0, help="logprob_chunk_tokens (0: the preset's)")
    ap.add_argument("--real-tokens", type=int, default=2048, help="section 3, measured for real")
    ap.add_argument("--fake-tokens", type=int, default=16384, help="section 3, fake tensors")
    ap.add_argument("--quick", action="store_true", help="smoke size: 2 steps, the 1.5B shape, "
                    "1 micro-batch a path, 512 and 2,048 response tokens")  # fmt: skip
    ap.add_argument("--json", default="", help="write every row here")
    a = ap.parse_args(argv)
    if a.quick:
        a.steps, a.models, a.micro_batches = 2, "Qwen2.5-1.5B", 1
        a.real_tokens, a.fake_tokens = 512, 2048
    names = [n for n in a.models.split(",") if n]
    if unknown := sorted(set(names) - set(SHAPES)):
        ap.error(f"unknown model {unknown[0]!r}: one of {', '.join(SHAPES)}")
    if a.steps < 1 or a.micro_batches < 0 or a.real_tokens < 1 or a.fake_tokens < 1:
        ap.error("--steps, --real-tokens and --fake-tokens must be >= 1, --micro-batches >= 0")
    torch.set_num_threads(2)
    torch.manual_seed(0)
    start = [time.perf_counter()] * 2

    def lap(section: int) -> None:
        now = time.perf_counter()
        print(f"(section {section}: {now - start[1]:.0f} s, {now - start[0]:.0f} s in all)")
        start[1] = now

    cfg = get_preset(a.preset)
    chunk = a.chunk or cfg.train.logprob_chunk_tokens
    w = preset_workload(cfg)
    devices, source = train_devices(a.preset, cfg, a.train_devices)
    budgets, budget_source = budgets_of(a.preset, cfg, a.budgets)

    # 1
    print(
        f"== 1. padding share: {a.preset}, {a.steps} steps (seed {a.seed}) of "
        f"{w.prompts(1)} prompts x {w.group_size} (prompt {dist(w.prompt)}, response "
        f"{dist(w.response)}); {devices} training devices ({source}); budgets {budget_source}",
        flush=True,
    )
    print(
        f"{'budget':>7} {'plan':<7}{'computed/real':>14}{'x packed':>9}{'mb/step':>9}"
        f"{'rows/mb':>8}{'busiest/mean':>13}"
    )
    padding: list[PaddingRow] = []
    for budget in budgets:
        rows = padding_share(a.preset, w, devices, budget, a.steps, a.seed)
        padding += rows
        for r in rows:
            print(
                f"{budget:>7} {r.plan:<7}{r.computed_per_real:>14.3f}"
                f"{r.computed_per_real / rows[0].computed_per_real:>8.2f}x"
                f"{r.micro_batches_per_step:>9.1f}{r.rows_per_micro_batch:>8.1f}"
                f"{r.busiest_over_mean:>13.2f}"
            )
    packed = [r for r in padding if r.plan == "packed"]
    worst = max(packed, key=lambda r: r.computed_per_real)
    padded_worst = next(
        r for r in padding if r.plan == "padded" and r.budget == worst.budget
    )  # fmt: skip
    print(
        f"bar: packed <= {PACKED_BAR} tokens computed per real token: "
        f"{'met' if worst.computed_per_real <= PACKED_BAR else 'MISSED'} "
        f"({worst.computed_per_real:.3f} at {worst.budget:,}; padded {padded_worst.computed_per_real:.2f})",
        flush=True,
    )
    lap(1)

    # 2
    checkpointing = not a.no_checkpointing
    budget = budgets[0]
    rows = step_rows(w, a.seed, 0)
    lengths = [p + r for p, r in rows]
    plans = {p: planner(lengths, devices, budget)[0] for p, planner in PLANS.items()}
    if a.micro_batches:
        plans = {p: plan[: a.micro_batches] for p, plan in plans.items()}
    print(
        f"\n== 2. FLOPs and bytes per real token, forward + backward, bf16 on the meta device: "
        f"rank 0's micro-batches of step 0 ({a.preset}'s draw, {budget:,}-token budget"
        + (f", the first {a.micro_batches} of each plan" if a.micro_batches else "")
        + f"), logits {chunk:,} tokens at a time, layers "
        + ("checkpointed" if checkpointing else "not checkpointed")
        + "; attention counted as a fused causal kernel",
        flush=True,
    )
    print(
        f"{'model':<14}{'path':<8}{'mbs':>4}{'real tok':>9}{'resp tok':>9}{'tok/real':>9}"
        f"{'GF/tok':>8}{'useful':>8}{'6N+attn':>8}{'comp/useful':>12}{'MFU ceil':>9}"
        f"{'created MB/tok':>15}{'read MB/tok':>12}"
    )
    flop_rows: list[FlopRow] = []
    for name in names:
        model = meta_model(name, checkpointing)
        pair = []
        for path in PATHS:
            r = count_path(name, model, path, rows, plans[path], chunk, checkpointing)
            pair.append(r)
            print(
                f"{name:<14}{path:<8}{r.micro_batches:>4}{r.real_tokens:>9,}{r.response_tokens:>9,}"
                f"{r.computed_tokens / r.real_tokens:>9.3f}{r.per_token(r.flops) / 1e9:>8.1f}"
                f"{r.per_token(r.useful_flops) / 1e9:>8.1f}{r.per_token(r.model_flops) / 1e9:>8.1f}"
                f"{r.flops / r.useful_flops:>11.2f}x{r.mfu_ceiling:>9.1%}"
                f"{r.per_token(r.created_bytes) / 1e6:>15.1f}{r.per_token(r.read_bytes) / 1e6:>12.1f}",
                flush=True,
            )
        pk, pd = pair
        print(
            f"{name:<14}padded / packed per real token: FLOPs {pd.per_token(pd.flops) / pk.per_token(pk.flops):.2f}x, "
            f"bytes created {pd.per_token(pd.created_bytes) / pk.per_token(pk.created_bytes):.2f}x, "
            f"read {pd.per_token(pd.read_bytes) / pk.per_token(pk.read_bytes):.2f}x; "
            f"MFU ceiling {pk.mfu_ceiling:.1%} packed, {pd.mfu_ceiling:.1%} padded "
            "(x the kernels' own efficiency on a GPU)",
            flush=True,
        )
        flop_rows += pair
        del model
    lap(2)

    # 3
    print(
        f"\n== 3. peak memory, forward + backward (MemTracker): Qwen2.5's {NARROW['vocab_size']:,} "
        f"vocabulary, hidden {NARROW['hidden_size']}, {NARROW['num_hidden_layers']} layers, "
        f"{NARROW['num_attention_heads']}:{NARROW['num_key_value_heads']} heads of {NARROW['head_dim']}, "
        f"fp32; rows of {ROW_PROMPT} prompt + {ROW_RESPONSE} response tokens; logits {chunk:,} tokens at a time",
        flush=True,
    )
    print(f"{'resp tok':>9}{'rows':>6} {'path':<8}{'real GB':>9}{'fake GB':>9}{'fake/real':>10}")
    memory: list[MemoryRow] = []
    sizes = [(a.real_tokens, True), (a.fake_tokens, False)]
    for tokens, real in sizes:
        for path in PATHS:
            real_gb = peak_gb(path, tokens, chunk, fake=False) if real else None
            fake_gb = peak_gb(path, tokens, chunk, fake=True)
            m = MemoryRow(path, tokens, max(1, tokens // ROW_RESPONSE), chunk, real_gb, fake_gb)
            memory.append(m)
            measured = (
                f"{real_gb:>9.2f}{fake_gb:>9.2f}{fake_gb / real_gb:>10.3f}"
                if real_gb is not None
                else f"{'-':>9}{fake_gb:>9.2f}{'-':>10}"
            )
            print(f"{tokens:>9,}{m.rows:>6} {path:<8}{measured}", flush=True)

    def fake_peaks(tokens: int) -> tuple[float, float]:
        """(packed, padded) fake-tensor peaks at `tokens` response tokens."""
        by_path = {m.path: m.fake_gb for m in memory if m.response_tokens == tokens}
        return by_path["packed"], by_path["padded"]

    for tokens, _ in sizes:
        pk_gb, pd_gb = fake_peaks(tokens)
        print(f"{tokens:,} response tokens: packed / padded peak {pk_gb / pd_gb:.3f}")
    pk_gb, pd_gb = fake_peaks(a.fake_tokens)
    agree = all(m.real_gb is None or abs(m.fake_gb - m.real_gb) <= 0.01 * m.real_gb for m in memory)
    print(
        f"bar: packed <= {MEMORY_BAR:g} x padded at {a.fake_tokens:,}: "
        f"{'met' if pk_gb <= MEMORY_BAR * pd_gb else 'MISSED'} ({pk_gb:.2f} GB vs {pd_gb:.2f} GB); "
        f"fake within 1% of real at {a.real_tokens:,}: {'yes' if agree else 'NO'}"
    )
    lap(3)
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(
            json.dumps(
                {
                    "preset": a.preset,
                    "train_devices": devices,
                    "chunk": chunk,
                    "padding": [
                        {**asdict(r), "computed_per_real": r.computed_per_real} for r in padding
                    ],
                    "flops": [
                        {
                            **asdict(r),
                            "flops_per_token": r.per_token(r.flops),
                            "useful_per_token": r.per_token(r.useful_flops),
                            "mfu_ceiling": r.mfu_ceiling,
                            "created_per_token": r.per_token(r.created_bytes),
                            "read_per_token": r.per_token(r.read_bytes),
                        }
                        for r in flop_rows
                    ],
                    "memory": [asdict(m) for m in memory],
                },
                indent=1,
            )
        )


if __name__ == "__main__":
    main()
