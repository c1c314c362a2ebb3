"""Memory per rank against its share: peak resident memory of 4 CPU ranks while they load a model.

    python tools/bench_memory.py [--gb 1.5] [--ranks 4] [--dir /tmp/pivot-bench-memory]
    python tools/bench_memory.py --smoke --gb 0.001 --ranks 2   # does every scenario run (tiny model)

Builds a random-weight dense Qwen2 checkpoint of about `--gb` GB (fp32, sharded safetensors with
an index), then on `--ranks` gloo ranks measures, per rank:
  (a) tp_load    a TP replica built on the meta device loads its slices from safetensors
  (b) fsdp_load  the FSDP trainer built on the meta device loads its rows from safetensors
  (c) gps_up     a TP replica shifts up: the GPS Read fills its parameters in place
The reference, measured in the same run: (r) whole_load, every rank building and loading the whole
model (`pivot.model.from_pretrained`, what each inference rank did before meta construction and
TP-sliced loading; its ratio is about the rank count).
Peak = the highest private resident memory (RssAnon, sampled every 2 ms) during the scenario minus
the same rank's value just before it; the value before (torch, process group, GPS handles) is the
fixed runtime overhead, printed separately. Each peak is printed as a ratio to the rank's share:
its TP slice (split tensors / ranks, the rest whole) or its FSDP rows, in fp32. For (a) and (c)
the bytes the rank read (from the files or from GPS) are printed against the share too.
Target: every ratio <= 1.5 and bytes read = share. GPS's own host buffers are shared memory
(RssShmem) and the safetensors files are memory-mapped page cache (RssFile): neither is private
to a rank, and neither is counted in its peak.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import threading
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from safetensors.torch import save_file

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pivot.config import EngineConfig, ModelConfig, TrainConfig  # noqa: E402
from pivot.dist import Slot  # noqa: E402
from pivot.engine import Engine  # noqa: E402
from pivot.gps.layout import Place, parallel_layout  # noqa: E402
from pivot.gps.spec import TensorSpec, qwen2_specs  # noqa: E402
from pivot.gps.store import GPSStore, HostInfo  # noqa: E402
from pivot.gps.torch_specs import specs_from_checkpoint  # noqa: E402
from pivot.model import CausalLM, ModelArgs, from_pretrained, load_state_dict  # noqa: E402
from pivot.model.meta_init import params_on_meta  # noqa: E402
from pivot.model.sliced_load import iter_boxes  # noqa: E402
from pivot.model.tp_plan import fsdp_range, tp_split  # noqa: E402
from pivot.roles.inference import InferenceRole  # noqa: E402
from pivot.roles.trainer import Trainer  # noqa: E402
from pivot.runtime.weights.service import WeightService  # noqa: E402

SHAPE = dict(hidden=1024, intermediate=4096, heads=16, kv_heads=4, head_dim=64, vocab=32768)
SMOKE_SHAPE = dict(
    hidden=64, intermediate=128, heads=4, kv_heads=2, head_dim=16, vocab=512
)  # --smoke: does it run
SHARD_BYTES = 512 << 20


def build_checkpoint(folder: Path, gb: float, shape: dict[str, int] = SHAPE) -> int:
    """A random fp32 Qwen2 folder of about `gb` GB (at least one layer of `shape`), written
    shard by shard; returns its bytes."""
    one = sum(s.nbytes for s in qwen2_specs(1, **shape, dtype="float32"))
    zero = sum(s.nbytes for s in qwen2_specs(0, **shape, dtype="float32"))
    layers = max(1, round((gb * 1e9 - zero) / (one - zero)))
    specs = qwen2_specs(layers, **shape, dtype="float32")
    args = ModelArgs(
        family="qwen2",
        vocab_size=shape["vocab"],
        hidden_size=shape["hidden"],
        intermediate_size=shape["intermediate"],
        num_hidden_layers=layers,
        num_attention_heads=shape["heads"],
        num_key_value_heads=shape["kv_heads"],
        head_dim=shape["head_dim"],
    )
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(args.to_hf("float32")))
    groups: list[list[TensorSpec]] = [[]]
    for s in specs:
        if groups[-1] and sum(t.nbytes for t in groups[-1]) + s.nbytes > SHARD_BYTES:
            groups.append([])
        groups[-1].append(s)
    weight_map = {}
    g = torch.Generator().manual_seed(0)
    for k, group in enumerate(groups, start=1):
        file = f"model-{k:05d}-of-{len(groups):05d}.safetensors"
        save_file(
            {s.name: torch.randn(s.shape, generator=g) * 0.02 for s in group}, str(folder / file)
        )
        weight_map.update({s.name: file for s in group})
    (folder / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )
    return sum(s.nbytes for s in specs)


def rss_anon() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


class Peak:
    """The highest RssAnon seen while the block runs, minus the value on entry."""

    def __enter__(self) -> Peak:
        gc.collect()
        self.base = self.peak = rss_anon()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def _sample(self) -> None:
        while not self._stop.wait(0.002):
            self.peak = max(self.peak, rss_anon())

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss_anon())
        self.grew = self.peak - self.base


def tp_share(specs: list[TensorSpec], world: int) -> int:
    """Bytes of one TP rank, from the TP plan: split tensors 1/world, the rest whole."""
    return sum(s.nbytes if tp_split(s.name).dim is None else s.nbytes // world for s in specs)


def fsdp_share(specs: list[TensorSpec], rank: int, world: int) -> int:
    total = 0
    for s in specs:
        lo, hi = fsdp_range(s.shape[0], rank, world)
        total += s.nbytes // s.shape[0] * (hi - lo)
    return total


def scenario_whole_load(rank: int, world: int, group: dist.ProcessGroup, folder: Path) -> dict:
    specs = specs_from_checkpoint(folder)
    with Peak() as peak:
        model = from_pretrained(folder)
    read = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    return {"base": peak.base, "grew": peak.grew, "share": tp_share(specs, world), "read": read}


def scenario_tp_load(rank: int, world: int, group: dist.ProcessGroup, folder: Path) -> dict:
    specs = specs_from_checkpoint(folder)
    mine = parallel_layout("policy", specs, list(range(world)), [0] * world, tp=world).held_by(
        Place(0, rank)
    )
    with Peak() as peak:
        with params_on_meta():
            model = CausalLM(ModelArgs.load(folder))
        engine = Engine(
            model, EngineConfig(kv_capacity_tokens=64, block_size=16), tp_group=group, device="cpu"
        )
        buffers, read = engine.weight_buffers(), 0
        with torch.no_grad():
            for name, t in iter_boxes(folder, {name: piece.box for name, _, piece in mine}):
                buffers[name].copy_(t)
                read += t.numel() * t.element_size()
        engine.load_weights(buffers, 1)
    return {"base": peak.base, "grew": peak.grew, "share": tp_share(specs, world), "read": read}


def scenario_fsdp_load(rank: int, world: int, group: dist.ProcessGroup, folder: Path) -> dict:
    specs = specs_from_checkpoint(folder)
    with Peak() as peak:
        trainer = Trainer.from_pretrained(folder, group, TrainConfig(), device="cpu")
    assert trainer.version == 0
    return {"base": peak.base, "grew": peak.grew, "share": fsdp_share(specs, rank, world)}


def scenario_gps_up(rank: int, world: int, group: dist.ProcessGroup, folder: Path) -> dict:
    specs = specs_from_checkpoint(folder)
    host_of = (0,) * world
    store = GPSStore(
        dist.distributed_c10d._get_default_store(),
        HostInfo(rank, 0, rank, host_of),
        namespace=f"benchmem-{os.environ['BENCH_MEMORY_TAG']}",
    )
    genrm = [TensorSpec("x", (1,), "float32")]  # the GenRM is not under test
    weights = WeightService(
        store, {"policy": specs, "genrm": genrm}, host_of, Slot("train", 0, ()), 0, "cpu"
    )
    if rank == 0:
        weights.publish("policy", load_state_dict(folder))
    dist.barrier(group)
    gc.collect()
    role = InferenceRole(
        role="rollout",
        model_path=folder,
        engine_cfg=EngineConfig(kv_capacity_tokens=64, block_size=16),
        model_cfg=ModelConfig(),
        device="cpu",
        seed=0,
    )
    slot = Slot("rollout", 0, tuple(range(world)))
    read = {}

    def gps_read(
        out: dict[str, torch.Tensor],
    ) -> tuple[dict[str, torch.Tensor], int]:  # roles.inference.Read
        tensors, version = weights.read("policy", slot, None, out=out)
        read["bytes"] = sum(t.numel() * t.element_size() for t in tensors.values())
        return tensors, version

    try:
        with Peak() as peak:
            _, phases = role.shift_up(0, group, gps_read)
        dist.barrier(group)
    finally:
        store.close()
    return {
        "base": peak.base,
        "grew": peak.grew,
        "share": tp_share(specs, world),
        "read": read["bytes"],
        "gps_read_s": phases["gps_read"],
    }


SCENARIOS = {
    "whole_load": scenario_whole_load,
    "tp_load": scenario_tp_load,
    "fsdp_load": scenario_fsdp_load,
    "gps_up": scenario_gps_up,
}


def _rank(rank: int, world: int, tag: str, name: str, folder: Path, out: Path) -> None:
    os.environ["BENCH_MEMORY_TAG"] = tag
    torch.set_num_threads(1)
    # a file store, not a TCP port: a free port chosen here can be taken by another process
    # before rank 0 listens on it (EADDRINUSE, seen in CI beside the other tests' jobs)
    store = f"file://{out / f'store-{tag}'}"
    dist.init_process_group("gloo", init_method=store, rank=rank, world_size=world)
    try:
        result = SCENARIOS[name](rank, world, dist.new_group(list(range(world))), folder)
        (out / f"{name}-{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=1.5, help="checkpoint size in GB (fp32)")
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument(
        "--dir", default="/tmp/pivot-bench-memory", help="where the checkpoint is written"
    )
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="a model of a few layers of hidden size 64 (does every scenario run; its ratios mean nothing)",
    )
    args = ap.parse_args()
    folder = Path(args.dir) / (
        f"qwen2-smoke-{args.gb:g}gb" if args.smoke else f"qwen2-{args.gb:g}gb"
    )
    if not (folder / "config.json").is_file():
        t0 = time.monotonic()
        size = build_checkpoint(folder, args.gb, SMOKE_SHAPE if args.smoke else SHAPE)
        print(
            f"checkpoint: {size / 1e9:.2f} GB in {time.monotonic() - t0:.0f} s at {folder}",
            flush=True,
        )
    else:
        print(f"checkpoint: reusing {folder}", flush=True)
    print(
        f"{'scenario':10s} {'rank':>4s} {'overhead MB':>12s} {'peak MB':>9s} {'share MB':>9s} "
        f"{'peak/share':>10s} {'read/share':>10s}"
    )
    worst = 0.0
    for name in SCENARIOS:
        mp.spawn(
            _rank,
            args=(args.ranks, f"{os.getpid()}-{name}", name, folder, Path(args.dir)),
            nprocs=args.ranks,
            join=True,
        )
        for rank in range(args.ranks):
            r = json.loads((Path(args.dir) / f"{name}-{rank}.json").read_text())
            ratio = r["grew"] / r["share"]
            worst = max(worst, ratio) if name != "whole_load" else worst
            read = f"{r['read'] / r['share']:10.4f}" if "read" in r else f"{'-':>10s}"
            print(
                f"{name:10s} {rank:4d} {r['base'] / 1e6:12.0f} {r['grew'] / 1e6:9.0f} {r['share'] / 1e6:9.0f} "
                f"{ratio:10.2f} {read}",
                flush=True,
            )
    print(f"worst peak/share of tp_load, fsdp_load, gps_up: {worst:.2f} (target <= 1.5)")


if __name__ == "__main__":
    main()
