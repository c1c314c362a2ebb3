"""`tools/bench_planner.py --budget`: what the planner's step-4 search choice costs and loses,
on random cluster snapshots (issue 47, item 5).

    python tools/bench_planner.py --budget [--devices 128] [--snapshots 60] [--caps 8]

Per snapshot (random layout, loads and queues; each role's queue dispatched first, as the
runtime plans) the planner runs with every candidate scored (`budget_s=0`, no cap: the paper's
exhaustive step 4, the reference of this run), with the default config (exhaustive within
`planner.budget_s`), and with each `--caps` count (the coarse-to-fine search the default used
to cap at 8). Printed per config: the plans that differ from the exhaustive one, the benefit
each loses against it (share of the exhaustive benefit, max and mean over the snapshots with a
positive exhaustive benefit), candidates scored, and planning milliseconds (wall and process
CPU, median and max), each as a ratio of the exhaustive planner's in the same run.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from pivot.config import PlannerConfig  # noqa: E402
from pivot.plan import ClusterSnapshot, PivotPlanner  # noqa: E402
from pivot.sched import Replica, SeqState, ThroughputModel  # noqa: E402

RO = (
    ThroughputModel(A=1e-6, B=0.010, C=2e-4, D=0.005),
    ThroughputModel(A=3e-6, B=0.004, C=1e-4, D=0.002),
)
RM = (
    ThroughputModel(A=2e-6, B=0.020, C=4e-4, D=0.010),
    ThroughputModel(A=4e-6, B=0.030, C=6e-4, D=0.015),
)


def random_cluster(n: int, seed: int) -> ClusterSnapshot:
    """`n` devices: rollout slots of 1 or 2 devices, reward slots of 4 or 8, a training pool of
    1/8 to 1/2 of the cluster (its batch ready or not); a random up set, running sequences and
    both queues, then each role's queue dispatched (the state a live scheduler holds)."""
    rng = random.Random(seed)
    ro_tp, rm_tp = rng.choice((1, 2)), rng.choice((4, 8))
    ro_model, rm_model = rng.choice(RO), rng.choice(RM)
    slots = [
        Replica(i, "rollout", tuple(range(ro_tp * i, ro_tp * i + ro_tp)), 60_000 * ro_tp, ro_model)
        for i in range(n // ro_tp)
    ]
    base = len(slots)
    slots += [
        Replica(
            base + i, "reward", tuple(range(rm_tp * i, rm_tp * i + rm_tp)), 40_000 * rm_tp, rm_model
        )
        for i in range(n // rm_tp)
    ]
    train_id, pool = len(slots), n // rng.choice((8, 4, 2))
    slots.append(Replica(train_id, "train", tuple(range(n - pool, n))))
    held: set[int] = set()
    active: set[int] = set()
    if rng.random() < 0.5:
        active.add(train_id)
        held |= set(range(n - pool, n))
    order = list(range(train_id))
    rng.shuffle(order)
    up_share = rng.uniform(0.5, 1.0)
    for rid in order:
        devs = set(slots[rid].devices)
        if not devs & held and rng.random() < up_share:
            active.add(rid)
            held |= devs
    running, sid = {}, 0
    for rid in sorted(active - {train_id}):
        k = rng.randint(0, 40 if slots[rid].role == "reward" else 12)
        running[rid] = tuple(
            SeqState(sid + j, rng.randint(100, 2000), rng.randint(0, 2000)) for j in range(k)
        )
        sid += k
    queues = {}
    for role in ("rollout", "reward"):
        m = rng.choice((0, rng.randint(0, 4 * n)))
        queues[role] = tuple(
            SeqState(sid + j, rng.randint(200, 2000), rng.randint(0, 1000)) for j in range(m)
        )
        sid += m
    snap = ClusterSnapshot(
        tuple(slots), frozenset(active), running, queues, train_batch_ready=rng.random() < 0.2
    )
    out_running, out_queues = {}, {}
    for role in ("rollout", "reward"):
        s = snap.scheduler(role)
        s.dispatch()
        out_running.update({rid: tuple(s.running(rid)) for rid in s.active_ids})
        out_queues[role] = tuple(s.queued())
    return ClusterSnapshot(
        snap.replicas, snap.active, out_running, out_queues, snap.train_batch_ready
    )


def run(snap: ClusterSnapshot, cfg: PlannerConfig) -> dict[str, Any]:
    planner = PivotPlanner(cfg)
    plan = planner.plan(snap)
    t = planner.last_timings
    return {
        "plan": None if plan is None else (plan.up, plan.down),
        "benefit": 0.0 if plan is None else plan.benefit,
        "scored": len(planner.last_candidates),
        "candidates": planner.last_num_candidates,
        "wall": t.total_s,
        "cpu": t.total_cpu_s,
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", action="store_true", help="(the entry flag of bench_planner.py)")
    ap.add_argument("--devices", type=int, default=128)
    ap.add_argument("--snapshots", type=int, default=60)
    ap.add_argument("--seed", type=int, default=0, help="first snapshot's seed")
    ap.add_argument(
        "--caps", type=int, nargs="*", default=[8], help="max_evaluated caps to compare"
    )
    args = ap.parse_args(argv)
    default = PlannerConfig()
    configs = {"exhaustive": PlannerConfig(budget_s=0.0, max_evaluated=0)}
    configs[f"default (budget {default.budget_s:g} s)"] = default
    for cap in args.caps:
        configs[f"cap {cap}"] = PlannerConfig(budget_s=0.0, max_evaluated=cap)
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in configs}
    for i in range(args.snapshots):
        snap = random_cluster(args.devices, args.seed + i)
        for name, cfg in configs.items():  # alternating: load on the machine hits all alike
            rows[name].append(run(snap, cfg))
    ref = rows["exhaustive"]
    cands = [r["candidates"] for r in ref]
    print(
        f"{args.snapshots} random {args.devices}-device snapshots (seeds {args.seed}.."
        f"{args.seed + args.snapshots - 1}), candidates per plan: median "
        f"{statistics.median(cands):g}, max {max(cands)}; each config against the exhaustive "
        f"planner (every candidate scored) of the same run"
    )
    print(
        f"{'config':<24} {'differ':>7} {'loss max':>9} {'loss mean':>9} {'scored':>7} | "
        f"{'wall ms med/max':>16} {'cpu ms med/max':>16} | {'wall / exhaustive':>17}"
    )
    ref_wall = statistics.median(r["wall"] for r in ref)
    for name, got in rows.items():
        differ = sum(1 for a, b in zip(got, ref) if a["plan"] != b["plan"])
        losses = [
            (b["benefit"] - a["benefit"]) / b["benefit"]
            for a, b in zip(got, ref)
            if b["benefit"] > 0
        ]
        wall = [r["wall"] * 1e3 for r in got]
        cpu = [r["cpu"] * 1e3 for r in got]
        print(
            f"{name:<24} {differ:>7} {max(losses, default=0.0):>9.1%} "
            f"{statistics.mean(losses) if losses else 0.0:>9.1%} "
            f"{statistics.median(r['scored'] for r in got):>7g} | "
            f"{statistics.median(wall):>7.1f}/{max(wall):<8.1f} "
            f"{statistics.median(cpu):>7.1f}/{max(cpu):<8.1f} | "
            f"{'x' + format(statistics.median(wall) / 1e3 / ref_wall, '.2f'):>17}"
        )


if __name__ == "__main__":
    main()
