"""One seed's emulated job of tools/bench_e2e_emulated.py (and bench_kv_migration.py): the tiny
runtime's config on emulated devices and the paper-scale job it stands for, the prompt shapes
the simulator's workload copies, the job's command line, its launch and its result, and the
measured window of steps in its logs."""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
from pathlib import Path

from torchrun_job import torchrun_main

from configs.presets import tiny_cpu
from pivot.config import PivotConfig
from pivot.emulate import PromptShape, emulated_workload, paper_config, read_tallies, runtime_config
from pivot.emulate.costs import BLOCK_SIZE, emulated_hardware
from pivot.emulate.measure import EmulatedRun, measure
from pivot.runtime.records.metrics import read_jsonl
from pivot.sim import SimOptions
from pivot.sim.window import Window, aligned_window, is_aligned

ROOT = Path(__file__).resolve().parents[1]


def base_config(args: argparse.Namespace, steps: int) -> PivotConfig:
    cfg = tiny_cpu()
    cfg.seed = args.seed
    cfg.cluster = dataclasses.replace(cfg.cluster, device="emulated")
    cfg.emulate = dataclasses.replace(
        cfg.emulate,
        hardware=args.hardware,
        corner=args.corner,
        preset=args.emulate,
        time_scale=args.time_scale,
        length_scale=args.length_scale,
    )
    cfg.rollout.tp, cfg.reward.tp = args.rollout_tp, args.reward_tp
    cfg.train = dataclasses.replace(
        cfg.train,
        devices=args.train_devices,
        steps=steps,
        batch_prompts=args.batch_prompts,
        group_size=args.group_size,
        filter_groups=0,
    )  # the simulator has no dynamic sampling
    return runtime_config(cfg)


def tiny_shape(cfg: PivotConfig) -> PromptShape:
    """The tiny task's prompts and judge template as the engines see them (real tokens), with the
    prefixes they share in whole KV blocks (pivot/engine/block_manager.py keys whole blocks)."""
    from os.path import commonprefix

    from pivot.model import TextTokenizer
    from pivot.rl.reward import GenRMScorer
    from pivot.tiny.shipped import ensure_tiny_models
    from pivot.tiny.task import judge_template, training_set

    tok = TextTokenizer.from_pretrained(ensure_tiny_models().policy)
    prompts = [p.text for p in training_set(cfg.data, seed=cfg.seed).prompts]
    ids = [tok.encode(p) for p in prompts]
    scorer = GenRMScorer(
        dataclasses.replace(
            cfg.reward, judge_template=judge_template(cfg.reward), judge_template_file=""
        )
    )
    judges = [
        tok.encode(scorer.prompt(q, f"{i * 37 % 101}")) for i, q in enumerate(prompts[:64])
    ]  # tiny answers

    def blocks(n: int) -> int:
        return n // BLOCK_SIZE * BLOCK_SIZE

    text = scorer.prompt("QUESTION", "RESPONSE")
    return PromptShape(
        sum(map(len, ids)) / len(ids),
        len(tok.encode(scorer.prompt("", ""))),
        blocks(len(commonprefix(ids))),
        blocks(len(commonprefix(judges))),
        text.index("QUESTION") < text.index("RESPONSE"),
    )


def flags_of(cfg: PivotConfig) -> list[str]:
    c, e = cfg.cluster, cfg.emulate
    return [
        "--cluster.mode",
        c.mode,
        "--planner.strategy",
        cfg.planner.strategy,
        "--cluster.device",
        "emulated",
        "--emulate.hardware",
        e.hardware,
        "--emulate.corner",
        e.corner,
        "--emulate.preset",
        e.preset,
        "--emulate.time-scale",
        str(e.time_scale),
        "--emulate.length-scale",
        str(e.length_scale),
        "--train.devices",
        str(cfg.train.devices),
        "--train.steps",
        str(cfg.train.steps),
        "--train.batch-prompts",
        str(cfg.train.batch_prompts),
        "--train.group-size",
        str(cfg.train.group_size),
        "--rollout.tp",
        str(cfg.rollout.tp),
        "--reward.tp",
        str(cfg.reward.tp),
        "--rollout.replicas",
        str(cfg.rollout.replicas),
        "--reward.replicas",
        str(cfg.reward.replicas),
        "--seed",
        str(cfg.seed),
        "--eval.every",
        "0",
        "--train.filter-groups",
        str(cfg.train.filter_groups),
        "--checkpoint.every",
        "0",
        "--log.no-progress",
        "--log.no-tensorboard",
    ]


def launch(
    name: str, cfg: PivotConfig, nproc: int, out: Path, extra: list[str]
) -> subprocess.Popen:
    """Start the job of `cfg` on `nproc` emulated devices, logging under out/name and its output
    to out/name.log (a file, not a pipe: a job run beside another never waits on a full pipe)."""
    cmd = torchrun_main(nproc, *flags_of(cfg), "--log.dir", str(out / name), *extra)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    # a run again replaces the tool's own earlier one (the job refuses a --log.dir holding
    # checkpoints unless it resumes them)
    shutil.rmtree(out / name, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f"{name}.log", "w") as log:
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)


def finish(name: str, proc: subprocess.Popen | None, out: Path, time_scale: float) -> EmulatedRun:
    """Wait for a launched job (None: one run before, `--reuse`) and read its emulated run (a
    failed job ends the tool with its log)."""
    if proc is not None and proc.wait() != 0:
        raise SystemExit(f"{name} failed:\n{(out / f'{name}.log').read_text()[-3000:]}")
    return measure(out / name, time_scale, read_tallies(out / name))


def window_of(args: argparse.Namespace) -> Window:
    """--steps/--warmup as given, else the aligned window of the job's staleness."""
    staleness = tiny_cpu().train.staleness
    warmup = 4 if args.warmup is None else args.warmup
    if args.steps is not None and not 0 <= warmup < args.steps:
        raise SystemExit(f"--warmup {warmup}: need 0 <= it < --steps {args.steps}")
    w = (
        aligned_window(staleness, warmup)
        if args.steps is None
        else Window(warmup, args.steps - warmup)
    )
    if w.warmup and not is_aligned(w, staleness):
        print(
            f"warning: {w.describe(staleness)}: a window that is not whole staleness periods cuts a burst"
        )
    return w


def window_s(run_dir: Path, w: Window, time_scale: float) -> float:
    """Emulated seconds of the measured steps: from the end of the last warm-up step (the roles
    coming up, without warm-up) to the end of the last measured step (metrics.jsonl, one row a step)."""
    rows = read_jsonl(run_dir / "metrics.jsonl")
    if len(rows) < w.steps:
        raise SystemExit(f"{run_dir}: {len(rows)} steps logged, the window needs {w.steps}")
    if not w.warmup:
        plans = [
            r
            for r in read_jsonl(run_dir / "timeline.jsonl")
            if r.get("kind") == "shift" and r.get("event") == "plan"
        ]
        return (rows[w.steps - 1]["time"] - plans[0]["time"]) / time_scale
    return (rows[w.steps - 1]["time"] - rows[w.warmup - 1]["time"]) / time_scale


@dataclasses.dataclass(frozen=True)
class SeedJob:
    """One seed's paper-scale job: the runtime's config, the simulator's options on the window."""

    paper: PivotConfig
    opts: SimOptions
    out: Path


def seed_job(args: argparse.Namespace, w: Window) -> SeedJob:
    """The job of seed `args.seed` on window `w`, announced on stdout."""
    # the runtime runs `staleness` steps past the window, so its measured steps do not drain alone
    # (the simulator keeps releasing prompts past its last step in a steady-state window)
    staleness = tiny_cpu().train.staleness
    base = base_config(args, w.steps + (staleness if w.warmup else 0))
    workload = emulated_workload(
        args.batch_prompts, args.group_size, tiny_shape(base), args.length_scale
    )
    opts = SimOptions(
        hardware=emulated_hardware(base), workload=workload, steps=w.steps, warmup_steps=w.warmup
    )
    print(
        f"seed {args.seed}: emulated {args.nproc} x {opts.hardware.name} serving {args.emulate} (rollout "
        f"TP{args.rollout_tp}, GenRM TP{args.reward_tp}), time scale {args.time_scale:g}, length "
        f"scale {args.length_scale}; {workload.describe(args.nproc)}; measured {w.describe(staleness)}",
        flush=True,
    )
    at = "" if args.corner == "nominal" else f"-{args.corner}"
    return SeedJob(
        paper_config(base, args.nproc, args.nproc), opts, ROOT / args.out / f"seed{args.seed}{at}"
    )
