"""tools/gpu_checks.py's `sglang` and `vllm` checks: a production engine's replica against the
embedded engine (greedy tokens), abort + release / resume + GPS weight update, and the GPS Read's
GB/s. The two engines run the same protocol; only how a replica is built differs."""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import torch
from gpu_check_lines import guarded, missing, skip
from gpu_check_models import SMALL, agreement, generate, prompts, small_folder

from pivot.engine import Engine, EngineConfig, Request, SamplingParams


def build_replica(backend: str, folder: Path) -> Any:
    """A TP 1 replica of `backend` on the current device, on dummy weights until the first load."""
    config = EngineConfig(kv_capacity_tokens=16384, max_running_seqs=16)
    device = torch.cuda.current_device()
    if backend == "sglang":
        from pivot.engine.backends.sglang_adapter import SglangEngine

        return SglangEngine.from_pretrained(
            folder, config, tp_size=1, base_gpu_id=device, dtype="bfloat16", mem_fraction_static=0.3
        )
    from pivot.engine.backends.vllm_adapter import VllmEngine

    return VllmEngine.from_pretrained(
        folder, config, tp_size=1, base_gpu_id=device, dtype="bfloat16", device="cuda"
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
