"""Planner and migration latency at 16 .. 4096 devices (paper §8.5, Table 2).

    python tools/bench_planner.py [--sizes 16 32 64 128 1024 4096] [--repeats 3]

Layout per size N: rollout replicas of 1 device, reward replicas of 4, a training pool of
N/4 devices (idle, batch not ready). Up: reward on [0, N/4), rollout on [N/4, 3N/4),
training on [3N/4, N). Reward is the bottleneck with a queue of thousands of sequences, so
the planner shifts reward up (pairs from training and from rollout), as in Figure 8.
Prints each phase (median of repeats), the paper's reported totals and the ratios
paper / ours and ours / target (wall and CPU), plus the migration latency of a shift down and
a shift up. `eval` is evaluated / total candidates: step 4 simulates at most
--max-evaluated of them (exact up to that count, coarse-to-fine search over k beyond).
For sizes up to --ref-max it also times the straightforward evaluation (frozen reference
scheduler, one full clone + migration per evaluated candidate, tests/plan/test_fast_eval.py),
checks that it yields the same benefits, and prints ref / ours for the evaluation step. `cpu ms` is the
process CPU time of one plan call (robust when other jobs load the machine).
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pivot.config import PlannerConfig  # noqa: E402
from pivot.plan import ClusterSnapshot, PivotPlanner  # noqa: E402
from pivot.sched import Replica, SeqState, ThroughputModel  # noqa: E402
from tests.plan.test_fast_eval import reference_benefits  # noqa: E402

PAPER_TOTAL_S = {16: 0.31, 32: 0.74, 64: 1.71, 128: 2.95}
TARGET_S = {128: 0.020, 4096: 0.300}
RO = ThroughputModel(A=1e-6, B=0.010, C=2e-4, D=0.005)
RM = ThroughputModel(A=2e-6, B=0.020, C=4e-4, D=0.010)


def scenario(n: int, seed: int = 0) -> ClusterSnapshot:
    rng = random.Random(seed)
    slots = [Replica(i, "rollout", (i,), 400_000, RO) for i in range(n)]
    slots += [Replica(n + i, "reward", tuple(range(4 * i, 4 * i + 4)), 200_000, RM) for i in range(n // 4)]
    slots.append(Replica(2 * n, "train", tuple(range(3 * n // 4, n))))
    active = {2 * n, *(n + i for i in range(n // 16)), *range(n // 4, 3 * n // 4)}
    running, sid = {}, 0
    for rid in sorted(active - {2 * n}):
        k = rng.randint(20, 60) if rid >= n else rng.randint(2, 12)
        running[rid] = tuple(SeqState(sid + j, rng.randint(200, 1500), rng.randint(0, 1500)) for j in range(k))
        sid += k
    queue = tuple(SeqState(sid + j, rng.randint(500, 2000), rng.randint(100, 1000)) for j in range(max(2000, 4 * n)))
    return ClusterSnapshot(tuple(slots), frozenset(active), running, {"reward": queue})


def timed(fn) -> float:  # noqa: ANN001
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[16, 32, 64, 128, 1024, 4096])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--ref-max", type=int, default=128, help="largest size also run on the reference path")
    ap.add_argument("--max-evaluated", type=int, default=PlannerConfig().max_evaluated, help="planner.max_evaluated")
    args = ap.parse_args()
    head = (
        f"{'devs':>5} {'seqs':>6} {'eval':>7} {'pre ms':>8} {'dp ms':>8} {'sim ms':>9} {'total ms':>9} "
        f"{'paper s':>7} {'paper/ours':>10} {'ours/target':>11} {'down ms':>8} {'up ms':>8} {'up/down':>7} "
        f"{'cpu ms':>8} {'cpu/target':>10} {'ref sim ms':>10} {'ref/ours':>8}"
    )
    print(head)
    for n in args.sizes:
        snap = scenario(n)
        planner = PivotPlanner(PlannerConfig(max_evaluated=args.max_evaluated))
        runs, cpu = [], []
        for _ in range(args.repeats):
            c0 = time.process_time()
            planner.plan(snap)
            cpu.append(time.process_time() - c0)
            runs.append(planner.last_timings)
        pre = statistics.median(t.preprocess_s for t in runs)
        dp = statistics.median(t.construct_s for t in runs)
        sim = statistics.median(t.simulate_s for t in runs)
        total = statistics.median(t.total_s for t in runs)
        ro, rm = snap.scheduler("rollout"), snap.scheduler("reward")
        down_ids = ro.active_ids[: len(ro.active_ids) // 4]
        up_ids = [r for r in rm.replica_ids if r not in rm.active_ids][: max(1, n // 32)]
        down = statistics.median(timed(lambda: ro.clone().shift_down(down_ids)) - timed(ro.clone) for _ in range(args.repeats))
        up = statistics.median(timed(lambda: rm.clone().shift_up(up_ids)) - timed(rm.clone) for _ in range(args.repeats))
        seqs = ro.num_sequences() + rm.num_sequences()
        ref_sim, ref_ratio = "-", "-"
        if n <= args.ref_max:
            cands = [c for c, _ in planner.last_candidates]
            t0 = time.perf_counter()
            want = reference_benefits(snap, planner.cfg, cands)
            ref_s = time.perf_counter() - t0
            if want != [b for _, b in planner.last_candidates]:
                raise SystemExit(f"{n} devices: optimised evaluation differs from the reference")
            ref_sim, ref_ratio = f"{ref_s * 1e3:.1f}", f"{ref_s / sim:.1f}x"
        paper = PAPER_TOTAL_S.get(n)
        target = TARGET_S.get(n)
        print(
            f"{n:>5} {seqs:>6} {f'{len(planner.last_candidates)}/{planner.last_num_candidates}':>7} {pre * 1e3:>8.1f} {dp * 1e3:>8.1f} {sim * 1e3:>9.1f} "
            f"{total * 1e3:>9.1f} {paper if paper else '-':>7} {(f'{paper / total:.0f}x' if paper else '-'):>10} "
            f"{(f'{total / target:.2f}' if target else '-'):>11} {max(down, 0) * 1e3:>8.2f} {max(up, 0) * 1e3:>8.2f} "
            f"{(up / down if down > 0 else float('nan')):>7.1f} {statistics.median(cpu) * 1e3:>8.1f} {(f'{statistics.median(cpu) / target:.2f}' if target else '-'):>10} {ref_sim:>10} {ref_ratio:>8}",
            flush=True,
        )


if __name__ == "__main__":
    main()
