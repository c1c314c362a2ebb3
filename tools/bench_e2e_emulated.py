"""`tools/bench_e2e.py --emulated`: every deployment on one emulated cluster (pivot/emulate/),
beside the simulator's prediction for the identical configuration.

The runtime runs `--nproc` CPU ranks as emulated devices of `--hardware` serving the paper-scale
models of `--emulate`; the simulator runs the same cluster, allocation, hardware and samples
(the emulated run draws each sample's response and judge lengths from the simulator's workload,
`step_samples`, so both process the same samples). Throughput = tokens of the trained samples
(rollout prompt + response, judge prompt + response, paper scale) of the measured steps / the
emulated time of the measured window: by default the period-aligned steady state of
pivot/sim/window.py (steps 4..9 after 4 warm-up steps, the runtime running 2 steps past it so
the window does not drain alone), over seeds 0, 1, 2, each figure a mean (min-max), the same
window in the simulator; real/sim is its ratio to the simulator's.
"w/o tr.overrun" takes out the emulated seconds the training slot's real tiny-model compute ran
past its windows (a limit of the CPUs emulating the devices, not of the runtime). `--band` adds
the simulator's pivot/mode at the cost model's slow and fast corners (pivot/sim/band.py), for
the configuration; `--corner slow|fast` runs the emulated devices (and the simulator beside
them) at that corner, so the emulated figures get their own band from two more runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from torchrun_job import torchrun_main

from configs.presets import tiny_cpu
from pivot.config import PivotConfig
from pivot.emulate import PromptShape, emulated_workload, paper_config, read_tallies, runtime_config
from pivot.emulate.costs import BLOCK_SIZE, emulated_hardware
from pivot.emulate.measure import EmulatedRun, measure
from pivot.runtime.records.metrics import read_jsonl
from pivot.sim import HARDWARE, SimOptions, SimResult, simulate
from pivot.sim.band import CORNERS, options_at
from pivot.sim.deploy import Allocation, deployment
from pivot.sim.report import breakdown
from pivot.sim.window import DEFAULT_SEEDS, Spread, Window, aligned_window, is_aligned


# The report: each mode's emulated throughput beside the simulator's, over seeds, with device-time
# shares and token tallies, and the simulator's pivot/mode at the cost model's corners.
def shares_real(r: EmulatedRun, world: int) -> str:
    total = world * r.emulated_s
    return "/".join(
        f"{100 * r.device_s.get(k, 0.0) / total:3.0f}"
        for k in ("rollout", "reward", "train", "shift")
    )


def shares_sim(s: SimResult) -> str:
    b = breakdown(s)
    parts = [b.roles[k].busy for k in ("rollout", "reward", "train")] + [
        sum(t.shifting for t in b.roles.values())
    ]
    return "/".join(f"{100 * x / b.total:3.0f}" for x in parts)


@dataclasses.dataclass(frozen=True)
class Measured:
    real: EmulatedRun
    sim: SimResult
    real_window_s: float

    @property
    def real_tps(self) -> float:
        return (
            self.sim.tokens / self.real_window_s
        )  # the same trained samples (drawn from the simulator's workload)


def report_band(corners: dict[str, dict[str, list[float]]]) -> None:
    """The simulator's pivot/mode at each corner (pivot/sim/band.py), mean (min-max) over seeds."""
    print("\nsimulated pivot/mode at the cost model's corners:")
    for name in next(iter(corners.values())):
        print(
            f"  {name:14s} "
            + "  ".join(
                f"{c} {Spread.of(p / m for p, m in zip(tps['pivot'], tps[name])).fmt('.2f', 'x')}"
                for c, tps in corners.items()
                if "pivot" in tps
            )
        )


def report(results: dict[str, list[Measured]], world: int, length_scale: int, w: Window) -> None:
    ref = results.get("pivot")
    print(
        f"\nmeasured {w.describe()} over seeds (mean (min-max)); the columns after pivot/mode are the first seed's whole run"  # noqa: E501 (one table row, easier read whole)
    )
    print(
        f"{'mode':14s} {'tok/s real':>22s} {'sim':>22s} {'real/sim':>17s} {'w/o tr.overrun':>14s} {'pivot/mode':>18s} "
        f"{'sim':>18s} {'plans':>5s} {'sim':>4s}  busy% ro/rm/tr/shift real | sim      tokens real/sim  "
        f"prefilled real/sim  reused% real | sim"
    )
    for name, ms in results.items():
        real, sim = ms[0].real, ms[0].sim
        tps, stps = Spread.of(m.real_tps for m in ms), Spread.of(m.sim.throughput for m in ms)
        ratio = Spread.of(m.real_tps / m.sim.throughput for m in ms)
        # the training slot's overrun over the whole run, prorated to the window
        fair = Spread.of(
            m.sim.tokens
            / (m.real_window_s * (1 - m.real.train_overrun_s / m.real.emulated_s))
            / m.sim.throughput
            for m in ms
        )
        piv = (
            Spread.of(r.real_tps / m.real_tps for r, m in zip(ref, ms)).fmt(".2f", "x")
            if ref
            else "-"
        )
        piv_sim = (
            Spread.of(r.sim.throughput / m.sim.throughput for r, m in zip(ref, ms)).fmt(".2f", "x")
            if ref
            else "-"
        )
        print(
            f"{name:14s} {tps.fmt():>22s} {stps.fmt():>22s} {ratio.fmt('.2f'):>17s} {fair.fmt('.2f'):>14s} {piv:>18s} "
            f"{piv_sim:>18s} {real.plans:5d} {sim.num_plans:4d}  {shares_real(real, world)} | {shares_sim(sim)}   "
            f"{real.real_tokens * length_scale / all_tokens(sim):15.2f}  {real.prefill_tokens * length_scale / sim.prefill_tokens:18.2f}  "  # noqa: E501 (one table row, easier read whole)
            f"{reused(real.prefill_tokens, real.prefix_hit_tokens):8.0f} | {reused(sim.prefill_tokens, sim.prefix_hit_tokens):3.0f}"  # noqa: E501 (one table row, easier read whole)
        )


def all_tokens(sim: SimResult) -> int:
    """Tokens of every sample the simulator released (the runtime's steps, window or not)."""
    return sum(s.tokens for st in sim.samples.values() for s in st)


def reused(prefilled: int, hits: int) -> float:
    """Percent of the prompt tokens to (re)compute that a shared prefix saved."""
    return 100 * hits / max(prefilled + hits, 1)


# One seed's emulated job (bench_kv_migration.py runs it too): the tiny runtime's config on emulated
# devices and the paper-scale job it stands for, the prompt shapes the simulator's workload copies,
# the job's command line, its launch and its result, and the measured window of steps in its logs.
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
    values = {
        "--cluster.mode": c.mode,
        "--planner.strategy": cfg.planner.strategy,
        "--cluster.device": "emulated",
        "--emulate.hardware": e.hardware,
        "--emulate.corner": e.corner,
        "--emulate.preset": e.preset,
        "--emulate.time-scale": e.time_scale,
        "--emulate.length-scale": e.length_scale,
        "--train.devices": cfg.train.devices,
        "--train.steps": cfg.train.steps,
        "--train.batch-prompts": cfg.train.batch_prompts,
        "--train.group-size": cfg.train.group_size,
        "--rollout.tp": cfg.rollout.tp,
        "--reward.tp": cfg.reward.tp,
        "--rollout.replicas": cfg.rollout.replicas,
        "--reward.replicas": cfg.reward.replicas,
        "--seed": cfg.seed,
        "--eval.every": 0,
        "--train.filter-groups": cfg.train.filter_groups,
        "--checkpoint.every": 0,
    }
    flags = [part for flag, value in values.items() for part in (flag, str(value))]
    return [*flags, "--log.no-progress", "--log.no-tensorboard"]


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


MODES = ("colocated", "disaggregated", "rr_colocated", "pivot", "static", "rule_based")


def add_args(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("--emulated")
    g.add_argument("--hardware", default="h20", choices=sorted(HARDWARE))
    g.add_argument(
        "--corner",
        default="nominal",
        choices=("nominal", *CORNERS),
        help="the devices' and the simulator's cost model at that end of its ranges (pivot/sim/band.py)",
    )
    g.add_argument(
        "--emulate",
        default="qwen2.5-7b+qwen3-30b-a3b",
        help="paper preset whose model sizes are emulated",
    )
    g.add_argument("--time-scale", type=float, default=0.03)
    g.add_argument("--length-scale", type=int, default=100)
    g.add_argument("--rollout-tp", type=int, default=1)
    g.add_argument("--reward-tp", type=int, default=1)
    g.add_argument("--train-devices", type=int, default=2)
    g.add_argument("--batch-prompts", type=int, default=8)
    g.add_argument("--group-size", type=int, default=16)
    g.add_argument("--seeds", type=int, nargs="+", default=list(DEFAULT_SEEDS))
    g.add_argument("--seed", type=int, default=None, help="one seed (same as --seeds N)")
    g.add_argument(
        "--warmup", type=int, default=None, help="steps before the measured window (default 4)"
    )
    g.add_argument("--out", default="runs/bench_emulated")
    g.add_argument(
        "--reuse",
        action="store_true",
        help="read the runs already in --out instead of running them again",
    )


def add_mode_args(ap: argparse.ArgumentParser) -> None:
    """Flags of the comparison across deployment modes (not of a single-mode job)."""
    g = ap.add_argument_group("--emulated, across modes")
    g.add_argument(
        "--rollout-devices",
        type=int,
        default=0,
        help="disaggregated rollout pool; 0 = half the rest",
    )
    g.add_argument(
        "--sim-only",
        action="store_true",
        help="only the simulator's figures (to choose a configuration)",
    )
    g.add_argument(
        "--band",
        action="store_true",
        help="also the simulator's pivot/mode at the cost model's slow and fast corners",
    )


def run(args: argparse.Namespace, extra: list[str]) -> None:
    w = window_of(args)
    seeds = [args.seed] if args.seed is not None else args.seeds
    world = args.nproc
    inference = world - args.train_devices
    unit = max(args.rollout_tp, args.reward_tp)
    rollout_devices = args.rollout_devices or max(unit, inference // 2 // unit * unit)
    results: dict[str, list[Measured]] = {}
    corners: dict[str, dict[str, list[float]]] = {c: {} for c in (CORNERS if args.band else ())}
    for seed in seeds:
        args.seed = seed
        job = seed_job(args, w)
        paper, opts, out = job.paper, job.opts, job.out
        for name in args.modes.split(","):
            sim_cfg = deployment(
                paper,
                name,
                Allocation(args.train_devices, rollout_devices if name == "disaggregated" else 0),
            )
            sim = simulate(sim_cfg, opts)
            for c, tps in corners.items():
                tps.setdefault(name, []).append(simulate(sim_cfg, options_at(opts, c)).throughput)
            if args.sim_only:
                print(
                    f"  {name}: sim {sim.throughput:,.0f} tok/s, window {sim.measured_s:,.0f} s, {sim.num_plans} plans, "  # noqa: E501 (one table row, easier read whole)
                    f"busy% ro/rm/tr/shift {shares_sim(sim)}"
                )
                continue
            done = args.reuse and (out / name / "emulated").is_dir()
            proc = None if done else launch(name, sim_cfg, world, out, extra)
            real = finish(name, proc, out, args.time_scale)
            results.setdefault(name, []).append(
                Measured(real, sim, window_s(out / name, w, args.time_scale))
            )
            print(
                f"  {name}: {real.emulated_s:,.0f} emulated s (sim {sim.sim_time_s:,.0f}), compute {real.compute_share:.0%} "  # noqa: E501 (one table row, easier read whole)
                f"of the windows, overrun {real.overrun_s:.2f} wall s over all ranks, of which the training slot's "
                f"{real.train_overrun_s:,.0f} emulated s",
                flush=True,
            )
    if results:
        report(results, world, args.length_scale, w)
    if corners:
        report_band(corners)
