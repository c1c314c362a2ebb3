"""KV-preserving migration in the emulated runtime: the same pivot-mode job on the same emulated
cluster with `--planner.kv-migration` and with `--planner.no-kv-migration`, run at the same time
(so both see the same CPU load), reported as ratios of one against the other, seed by seed.

    python tools/bench_kv_migration.py [--nproc 16] [--batch-prompts 16] [--time-scale 0.25] [--seeds 0 1 2] ...

Flags as tools/bench_e2e.py --emulated (hardware, model group, TP, training pool, length and time
scale, window, seeds). Throughput is over the same measured window as there: by default the
period-aligned steady state of pivot/sim/window.py (steps 4..9 after 4 warm-up steps, the
runtime running 2 steps past it), the trained samples' paper-scale tokens of those steps (the
simulator's, which draws the same samples) over their emulated time. Prints per run: that
throughput, tokens prefilled, of those re-prefilled (sequences resumed without their KV, or
preempted), KV tokens that migrated instead, fallbacks (KV a replica could not take), all over
the whole run, the tiny model's compute share of the emulated windows and the wall seconds it
overran them (high values mean the CPUs, not the emulated devices, set the pace: raise
--time-scale), beside the simulator's throughput for the identical configuration, samples and
window; then with/without ratios, emulated and simulated (nominal, and at the cost model's slow
and fast corners, pivot/sim/band.py), per seed and as mean (min-max) over the seeds.
`--corner slow|fast` runs the emulated devices themselves at that corner.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import bench_e2e_emulated as emu  # noqa: E402

from pivot.config import PivotConfig  # noqa: E402
from pivot.emulate.measure import EmulatedRun  # noqa: E402
from pivot.sim import SimResult, simulate  # noqa: E402
from pivot.sim.band import CORNERS, options_at  # noqa: E402
from pivot.sim.deploy import Allocation, deployment  # noqa: E402
from pivot.sim.window import Spread, Window  # noqa: E402

RUNS = {"kv": ["--planner.kv-migration"], "reprefill": ["--planner.no-kv-migration"]}


@dataclasses.dataclass(frozen=True)
class Pair:
    """One seed's two runs, each with the emulated seconds of its measured window, and the
    simulator's prediction of each (the identical configuration, samples and window)."""

    runs: dict[str, tuple[EmulatedRun, float]]
    sims: dict[str, SimResult]
    band: dict[str, float]
    """The simulated kv / reprefill ratio at each corner of the cost model (pivot/sim/band.py)."""

    def tps(self, name: str) -> float:
        # paper-scale tokens of the window's trained samples: the simulator's, the same samples
        return self.sims[name].tokens / self.runs[name][1]

    def ratio(self, num: str, den: str) -> tuple[float, float]:
        """num over den: emulated, simulated."""
        return self.tps(num) / self.tps(den), self.sims[num].throughput / self.sims[den].throughput


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--steps", type=int, default=None, help="default: the aligned window's")
    ap.add_argument("--nproc", type=int, default=16)
    emu.add_args(ap)
    ap.set_defaults(
        time_scale=0.25,  # 0.1 left the tiny models' compute at 70% of the windows on 2 cores
        reward_tp=4,
        train_devices=4,
        batch_prompts=16,
        out="runs/bench_kv_migration",
    )
    args, extra = ap.parse_known_args()
    w = emu.window_of(args)
    seeds = [args.seed] if args.seed is not None else args.seeds
    pairs = [run_seed(args, w, extra) for args.seed in seeds]
    if len(pairs) > 1:
        thr = Spread.of(p.ratio("kv", "reprefill")[0] for p in pairs)
        sim = Spread.of(p.ratio("kv", "reprefill")[1] for p in pairs)
        re = Spread.of(
            p.runs["kv"][0].reprefill_tokens / max(p.runs["reprefill"][0].reprefill_tokens, 1)
            for p in pairs
        )
        print(
            f"\nseeds {' '.join(map(str, seeds))}, kv / reprefill: throughput "
            f"{thr.fmt('.3f', 'x')} (simulated {sim.fmt('.3f', 'x')}; "
            + ", ".join(
                f"{c} corner {Spread.of(p.band[c] for p in pairs).fmt('.3f', 'x')}" for c in CORNERS
            )
            + f"), re-prefilled tokens {re.fmt('.3f', 'x')}"
        )


def run_seed(args: argparse.Namespace, w: Window, extra: list[str]) -> Pair:
    job = emu.seed_job(args, w)
    cfg = deployment(job.paper, "pivot", Allocation(args.train_devices, 0))
    sims = {name: simulate(with_kv(cfg, name == "kv"), job.opts) for name in RUNS}
    band = {}
    for c in CORNERS:
        opts = options_at(job.opts, c)
        on, off = (simulate(with_kv(cfg, kv), opts).throughput for kv in (True, False))
        band[c] = on / off
    procs = {
        name: emu.launch(name, cfg, args.nproc, job.out, [*flags, *extra])
        for name, flags in RUNS.items()
        if not (args.reuse and (job.out / name / "emulated").is_dir())
    }  # side by side, so both see the same CPU load
    runs = {name: emu.finish(name, procs.get(name), job.out, args.time_scale) for name in RUNS}
    pair = Pair(
        {n: (r, emu.window_s(job.out / n, w, args.time_scale)) for n, r in runs.items()},
        sims,
        band,
    )
    report(pair)
    return pair


def with_kv(cfg: PivotConfig, kv: bool) -> PivotConfig:
    # a copy, not dataclasses.replace: the paper-scale config is the simulator's, not one a
    # runtime on these ranks would accept (its checks run again on replace)
    out = copy.deepcopy(cfg)
    out.planner.kv_migration = kv
    return out


def report(pair: Pair) -> None:
    print(
        f"{'run':10s} {'tok/s':>9s} {'sim':>9s} {'prefilled':>9s} {'re-prefilled':>12s} "
        f"{'KV moved':>9s} {'fallback':>8s} {'plans':>5s} {'compute%':>8s} {'overrun s':>9s}"
    )
    for name, (r, _) in pair.runs.items():
        print(
            f"{name:10s} {pair.tps(name):9,.0f} {pair.sims[name].throughput:9,.0f} "
            f"{r.prefill_tokens:9,d} {r.reprefill_tokens:12,d} {r.kv_imported_tokens:9,d} "
            f"{r.kv_fallback_tokens:8,d} {r.plans:5d} {100 * r.compute_share:8.0f} {r.overrun_s:9.1f}"
        )
    kv, re = pair.runs["kv"][0], pair.runs["reprefill"][0]
    real, sim = pair.ratio("kv", "reprefill")
    print(
        f"kv / reprefill: throughput x{real:.3f} (simulated x{sim:.3f}; "
        + ", ".join(f"{c} corner x{r:.3f}" for c, r in pair.band.items())
        + "), prefilled tokens "
        f"x{kv.prefill_tokens / max(re.prefill_tokens, 1):.3f}, re-prefilled tokens "
        f"x{kv.reprefill_tokens / max(re.reprefill_tokens, 1):.3f}",
        flush=True,
    )


if __name__ == "__main__":
    main()
