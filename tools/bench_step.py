"""What one decode step and one prefill chunk of the embedded engine move, at hub shapes, against
the HBM floor: bytes read, written and created, kernels launched, host-to-device bytes.

    python tools/bench_step.py                                # the dense models the presets serve
    python tools/bench_step.py --models Qwen2.5-7B --batches 64 --contexts 4096,16384
    python tools/bench_step.py --json runs/bench_step.json    # + the rows, for docs and the simulator

Counted, not timed: the model runs on the meta device at the hub's real widths (no memory, no
arithmetic), through the engine's own step (`ModelRunner.run`: the paged attention backend and,
with `--graphs eager`, the decode graphs' static buffers), under the dispatcher-level counter of
pivot/engine/traffic.py. Every aten operator is seen with its real shapes; FlexAttention is
counted by its kernel's contract, here with the blocks its masks list computed from the step's
contexts (its masks' values live on the meta device too). bf16 throughout.

Per model, kernel, batch and context:
- `read / floor`: bytes the step reads over the floor: every weight once (the input embedding:
  only the batch's rows) and each sequence's K/V once; the physical lower bound of a decode step
  on any GPU (docs/gpu.md's eager steps: 17-21x it on an H200);
- `created / K/V`: bytes of new tensors the step makes over the live K/V's bytes (the gather
  reference copies every live block out of the cache each layer); for a prefill chunk, whose
  activations are made whatever the kernel, `created GB` says more (the gather reference's
  dense masks, one per query head sharing a K/V head, are its difference);
- `launches`: operators that launch a kernel on a GPU (views and bare allocations left out),
  the count a CUDA graph replays in one launch;
- `h2d MB`: host-to-device bytes the step's inputs cost; `syncs`: reads of device values by
  the host inside the step (the sampler's one read of the tokens comes after it, outside the
  count: tests/engine/test_sampler.py holds it to one).
The gather reference runs SDPA on meta tensors through its math decomposition (the scores made
and read in the open), which a GPU's fused SDPA kernel would not: its `read` is an upper bound of
what the gather path moves, its K/V copy (`index_select`) is exact.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_decode import step_bytes
from bench_launches import SHAPES

from pivot.engine.attention import StepInput
from pivot.engine.flex_paged import Q_TILE
from pivot.engine.model_runner import ModelRunner
from pivot.engine.traffic import Traffic, TrafficCounter
from pivot.model import CausalLM, ModelArgs
from pivot.model.meta_init import params_on_meta

DENSE = ("Qwen2.5-1.5B", "Qwen2.5-7B", "Qwen2.5-32B", "Qwen2.5-72B", "GLM-Z1-9B-0414")
"""The models the paper presets serve on the embedded engine (MoE judges go to vLLM)."""
BLOCK = {"flex": 64, "gather": 16}  # each kernel's default block (pivot/engine/config.py)


@dataclass
class Row:
    model: str
    kernel: str
    graphs: str
    phase: str
    batch: int
    context: int
    floor_gb: float
    read_gb: float
    written_gb: float
    created_gb: float
    kv_gb: float
    launches: int
    h2d_mb: float
    syncs: int

    @property
    def read_over_floor(self) -> float:
        return self.read_gb / self.floor_gb

    @property
    def created_over_kv(self) -> float:
        return self.created_gb / self.kv_gb if self.kv_gb else 0.0


def args_of(name: str) -> ModelArgs:
    return ModelArgs(**{**SHAPES[name], "max_position_embeddings": 131072, "eos_token_id": 0})


def runner_on_meta(
    args: ModelArgs, kernel: str, graphs: str, batch: int, tokens: int, longest: int
) -> ModelRunner:
    """A runner whose cache holds `tokens` and whose widest decode graph is `longest` (the role's
    longest sequence, as a run sizes it)."""
    with params_on_meta():
        model = CausalLM(args).to(torch.bfloat16)
    bs = BLOCK[kernel]
    blocks = -(-tokens // bs) + batch
    return ModelRunner(
        model, blocks, bs, kernel, None, "meta", graphs, max(batch, 1), longest, max_graphs=64
    )


def kv_bytes_per_token(args: ModelArgs) -> int:
    return args.num_hidden_layers * 2 * args.num_key_value_heads * args.head_dim * 2


def decode_input(batch: int, ctx: int, bs: int) -> StepInput:
    per_seq = -(-ctx // bs)
    return StepInput(
        token_ids=torch.zeros(batch, dtype=torch.long),
        q_lens=torch.ones(batch, dtype=torch.long),
        ctx_lens=torch.full((batch,), ctx, dtype=torch.long),
        block_ids=torch.arange(batch * per_seq),
        sample_rows=torch.arange(batch),
        copies=torch.zeros(0, dtype=torch.long),
        seq_ids=torch.arange(batch),
        dropped=torch.zeros(0, dtype=torch.long),
    )


def prefill_input(chunk: int, start: int, bs: int) -> StepInput:
    ctx = start + chunk
    return StepInput(
        token_ids=torch.zeros(chunk, dtype=torch.long),
        q_lens=torch.tensor([chunk]),
        ctx_lens=torch.tensor([ctx]),
        block_ids=torch.arange(-(-ctx // bs)),
        sample_rows=torch.tensor([chunk - 1]),
        copies=torch.zeros(0, dtype=torch.long),
        seq_ids=torch.tensor([0]),
        dropped=torch.zeros(0, dtype=torch.long),
    )


def flex_blocks(step: StepInput, bs: int) -> int:
    """Blocks the step's flex masks list in one layer: a decode row its sequence's blocks, a
    prefill tile its sequence's blocks up to its last query's (pivot/engine/flex_paged.py)."""
    total = 0
    for q, ctx in zip(step.q_lens.tolist(), step.ctx_lens.tolist()):
        if q == 1:
            total += -(-ctx // bs)
            continue
        start = ctx - q
        for tile in range(-(-q // Q_TILE)):
            last = min(start + (tile + 1) * Q_TILE, ctx) - 1
            total += last // bs + 1
    return total


def count(runner: ModelRunner, step: StepInput, kernel: str) -> Traffic:
    with torch.inference_mode(), TrafficCounter() as counter:
        runner.run(step)
    t = counter.traffic
    if kernel == "flex" and t.flex_calls:  # the masks' values are on meta: add what they list
        kv = t.flex_calls * flex_blocks(step, runner.block_size) * t.flex_block_bytes
        t.flex_kv_read += kv
        t.read += kv
    return t


def measure(
    name: str, kernel: str, graphs: str, phase: str, batch: int, ctx: int, chunk: int
) -> Row:
    args = args_of(name)
    if phase == "decode":
        runner = runner_on_meta(args, kernel, graphs, batch, batch * ctx, ctx)
        if graphs != "off":
            runner.capture_graphs()
        step = decode_input(batch, ctx, runner.block_size)
        live = batch * ctx * kv_bytes_per_token(args)
        floor = step_bytes(runner.model, batch, ctx)  # the weights and the live K/V, once
    else:
        runner = runner_on_meta(args, kernel, "off", 1, ctx, ctx)
        step = prefill_input(chunk, ctx - chunk, runner.block_size)
        live = ctx * kv_bytes_per_token(args)
        # each weight once, the whole context's K/V read once and the chunk's written once
        floor = step_bytes(runner.model, chunk, 0) + live + chunk * kv_bytes_per_token(args)
    t = count(runner, step, kernel)
    gb = 1e9
    return Row(
        name, kernel, graphs, phase, batch, ctx, floor / gb, t.read / gb, t.written / gb,
        t.created / gb, live / gb, t.launches, t.h2d / 1e6, t.syncs,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--models", default=",".join(DENSE))
    ap.add_argument("--kernels", default="flex,gather")
    ap.add_argument("--graphs", default="eager", help="off or eager (the graph path, uncaptured)")
    ap.add_argument("--batches", default="1,64,256")
    ap.add_argument("--contexts", default="4096,16384")
    ap.add_argument("--chunk", type=int, default=16384, help="prefill chunk (the presets' max)")
    ap.add_argument("--json", default="", help="write the rows here")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    names = [n for n in a.models.split(",") if n]
    if unknown := sorted(set(names) - set(SHAPES)):
        ap.error(f"unknown model {unknown[0]!r}: one of {', '.join(SHAPES)}")
    rows = []
    head = (
        f"{'model':<16}{'kernel':<8}{'phase':<9}{'batch':>6}{'context':>8}{'floor GB':>10}"
        f"{'read/floor':>11}{'created/KV':>11}{'created GB':>11}{'launches':>9}{'h2d MB':>8}{'syncs':>6}"
    )
    print(head, flush=True)
    for name in names:
        for kernel in a.kernels.split(","):
            cases = [
                ("decode", b, c)
                for b in map(int, a.batches.split(","))
                for c in map(int, a.contexts.split(","))
            ]
            cases += [("prefill", 1, a.chunk)]
            for phase, batch, ctx in cases:
                row = measure(name, kernel, a.graphs, phase, batch, ctx, a.chunk)
                rows.append(row)
                print(
                    f"{name:<16}{kernel:<8}{phase:<9}{batch:>6}{ctx:>8}{row.floor_gb:>10.2f}"
                    f"{row.read_over_floor:>10.2f}x{row.created_over_kv:>10.3f}x{row.created_gb:>11.2f}"
                    f"{row.launches:>9}"
                    f"{row.h2d_mb:>8.2f}{row.syncs:>6}",
                    flush=True,
                )
    if a.json:
        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        Path(a.json).write_text(
            json.dumps(
                [{**asdict(r), "read_over_floor": r.read_over_floor} for r in rows], indent=1
            )
        )


if __name__ == "__main__":
    main()
