"""`tools/bench_e2e.py --emulated`: every deployment on one emulated cluster (pivot/emulate/),
beside the simulator's prediction for the identical configuration.

The runtime runs `--nproc` CPU ranks as emulated devices of `--hardware` serving the paper-scale
models of `--emulate`; the simulator runs the same cluster, allocation, hardware and samples
(the emulated run draws each sample's response and judge lengths from the simulator's workload,
`step_samples`, so both process the same samples). Throughput = tokens of the trained samples
(rollout prompt + response, judge prompt + response, paper scale) / emulated time from the
roles coming up to the end of the last training step; real/sim is its ratio to the simulator's.
"w/o tr.overrun" takes out the emulated seconds the training slot's real tiny-model compute ran
past its windows (a limit of the CPUs emulating the devices, not of the runtime).
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from configs.presets import tiny_cpu
from pivot.config import PivotConfig
from pivot.emulate import PromptShape, emulated_workload, paper_config, read_tallies, runtime_config
from pivot.emulate.costs import BLOCK_SIZE
from pivot.emulate.measure import EmulatedRun, measure
from pivot.sim import HARDWARE, SimOptions, SimResult, simulate
from pivot.sim.deploy import Allocation, deployment
from pivot.sim.report import breakdown

MODES = ("colocated", "disaggregated", "rr_colocated", "pivot", "static", "rule_based")


def add_args(ap: argparse.ArgumentParser) -> None:
    g = ap.add_argument_group("--emulated")
    g.add_argument("--hardware", default="h20", choices=sorted(HARDWARE))
    g.add_argument("--emulate", default="qwen2.5-7b+qwen3-30b-a3b", help="paper preset whose model sizes are emulated")
    g.add_argument("--time-scale", type=float, default=0.03)
    g.add_argument("--length-scale", type=int, default=100)
    g.add_argument("--rollout-tp", type=int, default=1)
    g.add_argument("--reward-tp", type=int, default=1)
    g.add_argument("--train-devices", type=int, default=2)
    g.add_argument("--rollout-devices", type=int, default=0, help="disaggregated rollout pool; 0 = half the rest")
    g.add_argument("--batch-prompts", type=int, default=8)
    g.add_argument("--group-size", type=int, default=16)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--out", default="runs/bench_emulated")
    g.add_argument("--sim-only", action="store_true", help="only the simulator's figures (to choose a configuration)")
    g.add_argument("--reuse", action="store_true", help="read the runs already in --out instead of running them again")


def base_config(args: argparse.Namespace) -> PivotConfig:
    cfg = tiny_cpu()
    cfg.seed = args.seed
    cfg.cluster = dataclasses.replace(cfg.cluster, device="emulated", hardware=args.hardware, emulate=args.emulate,
                                      time_scale=args.time_scale, length_scale=args.length_scale)
    cfg.rollout.tp, cfg.reward.tp = args.rollout_tp, args.reward_tp
    cfg.train = dataclasses.replace(cfg.train, devices=args.train_devices, steps=args.steps,
                                    batch_prompts=args.batch_prompts, group_size=args.group_size,
                                    filter_groups=0)  # the simulator has no dynamic sampling
    return runtime_config(cfg)


def tiny_shape(cfg: PivotConfig) -> PromptShape:
    """The tiny task's prompts and judge template as the engines see them (real tokens), with the
    prefixes they share in whole KV blocks (pivot/engine/block_manager.py keys whole blocks)."""
    from os.path import commonprefix

    from pivot.model import TextTokenizer
    from pivot.rl.data import load_dataset
    from pivot.rl.plugins import judge_template
    from pivot.rl.reward import GenRMScorer
    from pivot.tiny.shipped import ensure_tiny_models

    tok = TextTokenizer.from_pretrained(ensure_tiny_models().policy)
    prompts = [p.text for p in load_dataset(cfg.data, seed=cfg.seed).prompts]
    ids = [tok.encode(p) for p in prompts]
    scorer = GenRMScorer(dataclasses.replace(cfg.reward, judge_template=judge_template(cfg.reward), judge_template_file=""))
    judges = [tok.encode(scorer.prompt(q, f"{i * 37 % 101}")) for i, q in enumerate(prompts[:64])]  # tiny answers

    def blocks(n: int) -> int:
        return n // BLOCK_SIZE * BLOCK_SIZE

    text = scorer.prompt("QUESTION", "RESPONSE")
    return PromptShape(sum(map(len, ids)) / len(ids), len(tok.encode(scorer.prompt("", ""))),
                       blocks(len(commonprefix(ids))), blocks(len(commonprefix(judges))),
                       text.index("QUESTION") < text.index("RESPONSE"))


def flags_of(cfg: PivotConfig) -> list[str]:
    c = cfg.cluster
    return ["--cluster.mode", c.mode, "--planner.strategy", cfg.planner.strategy, "--cluster.device", "emulated",
            "--cluster.hardware", c.hardware, "--cluster.emulate", c.emulate, "--cluster.time-scale", str(c.time_scale),
            "--cluster.length-scale", str(c.length_scale), "--train.devices", str(cfg.train.devices),
            "--train.steps", str(cfg.train.steps), "--train.batch-prompts", str(cfg.train.batch_prompts),
            "--train.group-size", str(cfg.train.group_size), "--rollout.tp", str(cfg.rollout.tp),
            "--reward.tp", str(cfg.reward.tp), "--rollout.replicas", str(cfg.rollout.replicas),
            "--reward.replicas", str(cfg.reward.replicas), "--seed", str(cfg.seed), "--eval.every", "0",
            "--train.filter-groups", str(cfg.train.filter_groups),
            "--checkpoint.every", "0", "--log.no-progress", "--log.no-tensorboard"]


def run_runtime(name: str, cfg: PivotConfig, nproc: int, out: Path, extra: list[str]) -> EmulatedRun:
    run_dir = out / name
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
           str(ROOT / "pivot" / "main.py"), *flags_of(cfg), "--log.dir", str(run_dir), *extra]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}
    proc = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise SystemExit(f"{name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return measure(run_dir, cfg.cluster.time_scale, read_tallies(run_dir))


def shares_real(r: EmulatedRun, world: int) -> str:
    total = world * r.emulated_s
    return "/".join(f"{100 * r.device_s.get(k, 0.0) / total:3.0f}" for k in ("rollout", "reward", "train", "shift"))


def shares_sim(s: SimResult) -> str:
    b = breakdown(s)
    parts = [b.roles[k].busy for k in ("rollout", "reward", "train")] + [sum(t.shifting for t in b.roles.values())]
    return "/".join(f"{100 * x / b.total:3.0f}" for x in parts)


def run(args: argparse.Namespace, extra: list[str]) -> None:
    base = base_config(args)
    world = args.nproc
    paper = paper_config(base, world, world)
    workload = emulated_workload(args.batch_prompts, args.group_size, tiny_shape(base), args.length_scale)
    opts = SimOptions(hardware=HARDWARE[args.hardware], workload=workload, steps=args.steps)
    inference = world - args.train_devices
    unit = max(args.rollout_tp, args.reward_tp)
    rollout_devices = args.rollout_devices or max(unit, inference // 2 // unit * unit)
    out = ROOT / args.out
    results: dict[str, tuple[EmulatedRun, SimResult]] = {}
    print(f"emulated {world} x {args.hardware} serving {args.emulate} (rollout TP{args.rollout_tp}, GenRM TP{args.reward_tp}), "
          f"time scale {args.time_scale:g}, length scale {args.length_scale}; {workload.describe(world)}", flush=True)
    for name in args.modes.split(","):
        sim_cfg = deployment(paper, name, Allocation(args.train_devices, rollout_devices if name == "disaggregated" else 0))
        sim = simulate(sim_cfg, opts)
        if args.sim_only:
            print(f"  {name}: sim {sim.throughput:,.0f} tok/s, {sim.sim_time_s:,.0f} s, {sim.num_plans} plans, "
                  f"busy% ro/rm/tr/shift {shares_sim(sim)}")
            continue
        done = args.reuse and (out / name / "emulated").is_dir()
        real = measure(out / name, args.time_scale, read_tallies(out / name)) if done else run_runtime(name, sim_cfg, world, out, extra)
        results[name] = (real, sim)
        print(f"  {name}: {real.emulated_s:,.0f} emulated s (sim {sim.sim_time_s:,.0f}), compute {real.compute_share:.0%} "
              f"of the windows, overrun {real.overrun_s:.2f} wall s over all ranks, of which the training slot's "
              f"{real.train_overrun_s:,.0f} emulated s", flush=True)
    if results:
        report(results, world, args.length_scale)


def report(results: dict[str, tuple[EmulatedRun, SimResult]], world: int, length_scale: int) -> None:
    ref = results.get("pivot")
    print(f"\n{'mode':14s} {'tok/s real':>10s} {'sim':>8s} {'real/sim':>8s} {'w/o tr.overrun':>14s} {'pivot/mode':>10s} "
          f"{'sim':>6s} {'plans':>5s} {'sim':>4s}  busy% ro/rm/tr/shift real | sim      tokens real/sim  "
          f"prefilled real/sim  reused% real | sim")
    for name, (real, sim) in results.items():
        tps = sim.tokens / real.emulated_s  # the same trained samples (drawn from the simulator's workload)
        ratio = f"x{ref[1].tokens / ref[0].emulated_s / tps:.2f}" if ref else "-"
        ratio_sim = f"x{ref[1].throughput / sim.throughput:.2f}" if ref else "-"
        fair = sim.tokens / (real.emulated_s - real.train_overrun_s) / sim.throughput
        print(f"{name:14s} {tps:10,.0f} {sim.throughput:8,.0f} {tps / sim.throughput:8.2f} {fair:14.2f} {ratio:>10s} {ratio_sim:>6s} "
              f"{real.plans:5d} {sim.num_plans:4d}  {shares_real(real, world)} | {shares_sim(sim)}   "
              f"{real.real_tokens * length_scale / sim.tokens:15.2f}  {real.prefill_tokens * length_scale / sim.prefill_tokens:18.2f}  "
              f"{reused(real.prefill_tokens, real.prefix_hit_tokens):8.0f} | {reused(sim.prefill_tokens, sim.prefix_hit_tokens):3.0f}")


def reused(prefilled: int, hits: int) -> float:
    """Percent of the prompt tokens to (re)compute that a shared prefix saved."""
    return 100 * hits / max(prefilled + hits, 1)
