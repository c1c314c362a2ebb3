"""Planner and migration latency at 16 .. 4096 devices (paper §8.5, Table 2).

    python tools/bench_planner.py [--sizes 16 32 64 128 1024 4096] [--repeats 3] [--undrained]

Layout per size N: rollout replicas of 1 device, reward replicas of 4, a training pool of
N/4 devices (idle, batch not ready). Up: reward on [0, N/4), rollout on [N/4, 3N/4),
training on [3N/4, N). Reward is the bottleneck with a queue of thousands of sequences, so
the planner shifts reward up (pairs from training and from rollout), as in Figure 8.

Per size (median of --repeats plan calls): each phase's wall and process-CPU milliseconds
(pre = steps 1-2, dp = step 3, sim = step 4), the totals, the paper's reported total and
paper / ours, the target and PASS/MISS (judged on CPU time, which other jobs on the machine
do not inflate), and the CPU time of a scheduler's shift down and shift up (migration). `eval` is
evaluated / total candidates: step 4 simulates at most --max-evaluated of them (exact up to
that count, coarse-to-fine search over k beyond).

Scenario: by default the planner sees the state a live scheduler holds (`drained`: each
role's queue dispatched first, so only what no up replica can take waits; at 1024 devices and
more nothing waits, and step 4's cost is the migration's abort/re-dispatch loop). That is the
only state the runtime plans on: pivot/runtime/control/controller.py `tick()` calls `sched.dispatch()`
for both roles and then `mode.plan()`. --undrained keeps the whole queue waiting (a stress
case the runtime never produces: every candidate's dispatch places thousands of sequences).

Exactness: up to --check-max devices the evaluated benefits are recomputed the straightforward
way, `clone_benefits`: per candidate, a clone of each role's production scheduler shifted down
and up (the evaluation before pivot/sched/trial.py; `clone/ours` compares the evaluation step);
`same` says whether the plan (up, down, benefit) and every evaluated benefit are identical.
tests/plan/test_fast_eval.py runs `clone_benefits` with the paper oracle
(tests/sched/reference_scheduler.py) instead, on this scenario at 256 devices among others.

`--budget` compares step 4's search choices (exhaustive, the default's time budget, caps) on
random snapshots instead (tools/bench_planner_budget.py).

Against an older version: `--against REV` (a git revision) imports pivot/ as of REV into this
process beside ours (`git archive` into a temporary folder) and runs both versions' rounds
alternately on the same scenario; it prints ours/REV per size for the plan's CPU time, step 4
and the shift CPU times (least of the repeats), and whether both versions chose the same plan
with the same evaluated benefits.
"""

from __future__ import annotations

import argparse
import importlib
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

from pivot.config import PlannerConfig
from pivot.plan import ClusterSnapshot, PivotPlanner, benefit, overall_throughput
from pivot.plan.candidates import Candidate
from pivot.sched import Replica, SeqState, ShiftAwareScheduler, ThroughputModel

# The scenario (paper Table 2's layout at N devices, reward the bottleneck) and the straightforward
# evaluation its planner's step 4 is checked against (`clone_benefits`, also run by
# tests/plan/test_fast_eval.py with the paper oracle), with step 5 on its benefits.
RO = ThroughputModel(A=1e-6, B=0.010, C=2e-4, D=0.005)
RM = ThroughputModel(A=2e-6, B=0.020, C=4e-4, D=0.010)
_RO, _RM, _Replica, _SeqState, _Snapshot = RO, RM, Replica, SeqState, ClusterSnapshot


def scenario(n: int, seed: int = 0, api: Any = None) -> ClusterSnapshot:
    """`api`: where Replica, SeqState, ThroughputModel and ClusterSnapshot come from (default:
    this checkout's pivot; --against passes the older version's)."""
    Replica, SeqState, ClusterSnapshot = (
        (api.Replica, api.SeqState, api.ClusterSnapshot)
        if api
        else (_Replica, _SeqState, _Snapshot)
    )
    RO, RM = (api.ThroughputModel(m.A, m.B, m.C, m.D) for m in (_RO, _RM)) if api else (_RO, _RM)
    rng = random.Random(seed)
    slots = [Replica(i, "rollout", (i,), 400_000, RO) for i in range(n)]
    slots += [
        Replica(n + i, "reward", tuple(range(4 * i, 4 * i + 4)), 200_000, RM) for i in range(n // 4)
    ]
    slots.append(Replica(2 * n, "train", tuple(range(3 * n // 4, n))))
    active = {2 * n, *(n + i for i in range(n // 16)), *range(n // 4, 3 * n // 4)}
    running, sid = {}, 0
    for rid in sorted(active - {2 * n}):
        k = rng.randint(20, 60) if rid >= n else rng.randint(2, 12)
        running[rid] = tuple(
            SeqState(sid + j, rng.randint(200, 1500), rng.randint(0, 1500)) for j in range(k)
        )
        sid += k
    queue = tuple(
        SeqState(sid + j, rng.randint(500, 2000), rng.randint(100, 1000))
        for j in range(max(2000, 4 * n))
    )
    return ClusterSnapshot(tuple(slots), frozenset(active), running, {"reward": queue})


def drained(snap: Any) -> Any:
    """The same cluster after each role's scheduler dispatched its queue (a live scheduler's
    state: sequences wait only when no up replica can hold them)."""
    running, queues = {}, {}
    for role in ("rollout", "reward"):
        s = snap.scheduler(role)
        s.dispatch()
        running.update({rid: tuple(s.running(rid)) for rid in s.active_ids})
        queues[role] = tuple(s.queued())
    return type(snap)(snap.replicas, snap.active, running, queues)


def production_scheduler(snap: ClusterSnapshot, role: str, migrate: bool) -> ShiftAwareScheduler:
    return snap.scheduler(role, migrate=migrate)


def clone_benefits(
    snap: ClusterSnapshot,
    cfg: PlannerConfig,
    cands: list[Candidate],
    scheduler: Callable[..., Any] = production_scheduler,
) -> list[float]:
    """Step 4 the straightforward way: per candidate, clone each role's `scheduler(snap, role,
    migrate)`, shift down, shift up and read its rate (busy replicas without the throughput model)."""

    def rate(s: Any) -> float:
        return (
            float(sum(1 for rid in s.active_ids if s.load(rid)[0] > 0))
            if not cfg.throughput_model
            else s.throughput()
        )

    base = {r: scheduler(snap, r, cfg.migration) for r in ("rollout", "reward")}
    role_of = {r.replica_id: r.role for r in snap.replicas}
    n = {r: base[r].num_sequences() for r in base}
    cur = overall_throughput(n["rollout"], rate(base["rollout"]), n["reward"], rate(base["reward"]))
    out = []
    for c in cands:
        rates = {}
        for role, s in base.items():
            sim = s.clone()
            down = sorted(r for r in c.down if role_of[r] == role)
            up = sorted(r for r in c.up if role_of[r] == role)
            if down:
                sim.shift_down(down)
            if up:
                sim.shift_up(up)
            rates[role] = rate(sim)
        t = overall_throughput(n["rollout"], rates["rollout"], n["reward"], rates["reward"])
        out.append(benefit(cfg.horizon_s, t, cur, c.penalty))
    return out


def best_of(cands: list, benefits: list[float]) -> tuple | None:
    """The planner's step 5 on (candidate, benefit) in ascending k (no training shift here)."""
    best = None
    for c, b in zip(cands, benefits):
        if b > 0 and (best is None or b > best[2]):
            best = (c.up, c.down, b)
    return best


# --against REV: pivot/ as of another git revision imported into this process beside ours, and the
# table of ours / REV once both versions have planned.
def load_version(rev: str, tmp: str) -> SimpleNamespace:
    """pivot/ as of git revision `rev`, imported into this process beside ours: `git archive`
    into `tmp`, its modules imported under their own names, then ours put back in
    sys.modules (neither version imports pivot lazily on the planner's path, so each keeps
    calling its own code)."""
    tree = subprocess.run(
        ["git", "-C", str(ROOT), "archive", rev, "pivot"], capture_output=True, check=False
    )
    if tree.returncode != 0:
        raise SystemExit(f"--against {rev}: git archive failed: {tree.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", tmp], input=tree.stdout, check=True)
    ours: dict[str, ModuleType] = {
        k: m for k, m in sys.modules.items() if k == "pivot" or k.startswith("pivot.")
    }
    for k in ours:
        del sys.modules[k]
    sys.path.insert(0, tmp)
    try:
        cfg, plan, sched = (
            importlib.import_module(f"pivot.{m}") for m in ("config", "plan", "sched")
        )
        return SimpleNamespace(
            PlannerConfig=cfg.PlannerConfig,
            PivotPlanner=plan.PivotPlanner,
            ClusterSnapshot=plan.ClusterSnapshot,
            Replica=sched.Replica,
            SeqState=sched.SeqState,
            ThroughputModel=sched.ThroughputModel,
        )
    finally:
        sys.path.remove(tmp)
        for k in [k for k in sys.modules if k == "pivot" or k.startswith("pivot.")]:
            del sys.modules[k]
        sys.modules.update(ours)


def print_against(
    rev: str, args: argparse.Namespace, ours: list[dict[str, Any]], theirs: list[dict[str, Any]]
) -> None:
    print(
        f"\nours / {rev}: both versions in this process, their rounds alternating (least of {args.repeats}; plan, "
        f"step 4, down, up: process CPU of plan() and of the scheduler's shifts; < 1 is faster)"
    )
    print(f"{'devs':>5} | {'plan cpu':>8} {'sim cpu':>8} {'down':>6} {'up':>6} | {'same plan':>9}")
    for r, t in zip(ours, theirs):

        def ratio(k: str) -> str:
            return f"{r[k] / t[k]:.2f}" if t[k] > 0 else "-"  # noqa: B023 (called in this iteration)

        same = "yes" if r["plan"] == t["plan"] and r["benefits"] == t["benefits"] else "NO"
        print(
            f"{r['n']:>5} | {ratio('cpu_s'):>8} {ratio('sim_cpu_s'):>8} {ratio('down_s'):>6} {ratio('up_s'):>6} | {same:>9}"  # noqa: E501 (one table row, easier read whole)
        )
        if same == "NO":
            raise SystemExit(f"{r['n']} devices: the plan differs from {rev}'s")


PAPER_TOTAL_S = {16: 0.31, 32: 0.74, 64: 1.71, 128: 2.95}
TARGET_S = {128: 0.020, 4096: 0.300}


def timed(fn) -> float:  # noqa: ANN001
    """Process CPU seconds of `fn()` (other jobs on the machine inflate wall time, not this)."""
    t0 = time.process_time()
    fn()
    return time.process_time() - t0


class Setup:
    """One version's planner, snapshot and shift operands at one size."""

    def __init__(self, n: int, args: argparse.Namespace, api: Any = None) -> None:
        snap = scenario(n, api=api)
        self.snap = snap if args.undrained else drained(snap)
        # an older version without a time budget (max_evaluated >= 2 then) plans with its default
        cap = {"max_evaluated": args.max_evaluated} if args.max_evaluated or not api else {}
        cfg = (api.PlannerConfig if api else PlannerConfig)(**cap)
        self.planner = (api.PivotPlanner if api else PivotPlanner)(cfg)
        self.ro, self.rm = self.snap.scheduler("rollout"), self.snap.scheduler("reward")
        self.down_ids = self.ro.active_ids[: len(self.ro.active_ids) // 4]
        self.up_ids = [r for r in self.rm.replica_ids if r not in self.rm.active_ids][
            : max(1, n // 32)
        ]
        self.timings: list[Any] = []
        self.downs: list[float] = []
        self.ups: list[float] = []
        self.plan: Any = None

    def round(self) -> None:
        """One plan call and one shift down and up of the schedulers (each on a fresh clone)."""
        self.plan = self.planner.plan(self.snap)
        self.timings.append(self.planner.last_timings)
        self.downs.append(
            timed(lambda c=self.ro.clone(): c.shift_down(self.down_ids))  # noqa: B008 (cloned before timing)
        )  # clone, then time
        self.ups.append(timed(lambda c=self.rm.clone(): c.shift_up(self.up_ids)))  # noqa: B008

    def record(self) -> dict[str, Any]:
        """The least of the rounds (the figure noise inflates least), the plan and the benefits."""
        p = self.plan
        return {
            "cpu_s": min(t.total_cpu_s for t in self.timings),
            "sim_cpu_s": min(t.cpu_s[2] for t in self.timings),
            "down_s": min(self.downs),
            "up_s": min(self.ups),
            "plan": None if p is None else (sorted(p.up), sorted(p.down), p.benefit),
            "benefits": [b for _, b in self.planner.last_candidates],
        }


def measure(
    n: int, args: argparse.Namespace, ref: Any = None
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Plan `args.repeats` times at `n` devices (alternating with the `ref` version's planner
    round by round, if given), print our row, return our and its figures."""
    mine = Setup(n, args)
    theirs = Setup(n, args, ref) if ref is not None else None
    for _ in range(args.repeats):
        mine.round()
        if theirs is not None:
            theirs.round()
    runs, planner, snap, plan = mine.timings, mine.planner, mine.snap, mine.plan
    med = statistics.median
    wall = [
        med(getattr(t, f) for t in runs)
        for f in ("preprocess_s", "construct_s", "simulate_s", "total_s")
    ]
    cpu = [med(t.cpu_s[i] for t in runs) for i in range(3)] + [med(t.total_cpu_s for t in runs)]
    down, up = med(mine.downs), med(mine.ups)
    seqs = mine.ro.num_sequences() + mine.rm.num_sequences()
    cands = [c for c, _ in planner.last_candidates]
    got = [b for _, b in planner.last_candidates]
    mine_plan = None if plan is None else (plan.up, plan.down, plan.benefit)
    ref_sim, ref_ratio, same = "-", "-", "-"
    if n <= args.check_max:
        t0 = time.perf_counter()
        want = clone_benefits(snap, planner.cfg, cands)
        ref_s = time.perf_counter() - t0
        ref_sim, ref_ratio = f"{ref_s * 1e3:.1f}", f"{ref_s / wall[2]:.1f}x"
        same = "yes" if want == got and best_of(cands, want) == mine_plan else "NO"
    paper, target = PAPER_TOTAL_S.get(n), TARGET_S.get(n)
    verdict = "-" if target is None else ("PASS" if cpu[3] <= target else "MISS")
    ph = " ".join(
        f"{w * 1e3:>{wd}.1f}/{c * 1e3:<{wd}.1f}" for w, c, wd in zip(wall, cpu, (5, 5, 6, 6))
    )
    print(
        f"{n:>5} {seqs:>6} {f'{len(cands)}/{planner.last_num_candidates}':>7} | {ph} | "
        f"{paper if paper else '-':>7} {(f'{paper / wall[3]:.0f}x' if paper else '-'):>10} "
        f"{(f'{target * 1e3:.0f}' if target else '-'):>9} {(f'{cpu[3] / target:.2f}' if target else '-'):>10} {verdict:>4} | "  # noqa: E501 (one table row, easier read whole)
        f"{down * 1e3:>7.2f} {up * 1e3:>7.2f} | {ref_sim:>10} {ref_ratio:>10} {same:>4}",
        flush=True,
    )
    if same == "NO":
        raise SystemExit(f"{n} devices: the evaluation differs from the exact one")
    return {"n": n, **mine.record()}, None if theirs is None else {"n": n, **theirs.record()}


def main() -> None:
    if "--budget" in sys.argv[1:]:  # step 4's search choice on random snapshots
        import bench_planner_budget

        bench_planner_budget.main()
        return
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[16, 32, 64, 128, 1024, 4096])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument(
        "--check-max",
        type=int,
        default=4096,
        help="largest size checked against production-scheduler clones",
    )
    ap.add_argument(
        "--undrained",
        action="store_true",
        help="plan with the queues not dispatched (stress case, see the docstring)",
    )
    ap.add_argument(
        "--max-evaluated",
        type=int,
        default=PlannerConfig().max_evaluated,
        help="planner.max_evaluated",
    )
    ap.add_argument(
        "--against",
        default="",
        metavar="REV",
        help="also measure pivot/ as of this git revision; print ours/REV",
    )
    args = ap.parse_args()
    head = (
        f"{'devs':>5} {'seqs':>6} {'eval':>7} | {'pre ms':>11} {'dp ms':>11} {'sim ms':>13} {'total ms':>13} | "
        f"{'paper s':>7} {'paper/ours':>10} {'target ms':>9} {'cpu/target':>10} {'':>4} | {'down ms':>7} {'up ms':>7} | "  # noqa: E501 (one table row, easier read whole)
        f"{'clone ms':>10} {'clone/ours':>10} {'same':>4}"
    )
    print(
        f"scenario: {'undrained (queues not dispatched: stress case)' if args.undrained else 'drained (queues dispatched first, as the runtime plans)'}"  # noqa: E501 (one table row, easier read whole)
    )
    print("phase columns: wall/cpu (median of repeats); down/up: cpu")
    print(head)
    with tempfile.TemporaryDirectory(prefix="bench-planner-ref-") as tmp:
        ref = load_version(args.against, tmp) if args.against else None
        pairs = [measure(n, args, ref) for n in args.sizes]
    if ref is not None:
        print_against(
            args.against, args, [a for a, _ in pairs], [b for _, b in pairs if b is not None]
        )


if __name__ == "__main__":
    main()
