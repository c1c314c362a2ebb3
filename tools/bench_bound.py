"""PivotRL against the tighter of its bounds, variant by variant (docs/toward_the_bound.md).

    python tools/bench_bound.py --groups qwen2.5-1.5b+glm-z1-9b --hardware h200 --seeds 0 --tails
    python tools/bench_bound.py --variants base no-kv          # 1.5B and 7B, H20 and H200, seeds 0 1 2
    python tools/bench_bound.py --variants no-kv no-kv+paper-phi   # the planner's penalty
    python tools/bench_bound.py --variants base kv-device      # KV as large as the memory allows

Every run is the pivot deployment at a fixed training slot (`--train`, default the group's tuned
one), on the aligned window (pivot/sim/window.py: steps 4..9 at staleness 2), with KV-preserving
migration on (`planner.kv_migration`) unless a variant turns it off. A variant is a '+'-joined
set of config overrides and function patches (`VARIANTS`); each run
prints tokens/s, the share of the tighter bound (and of each bound), shift-ups, aborts and
re-prefilled tokens, and the ratio over the same seed's run of the first variant listed (the
same samples, so an inverse time ratio). Two diagnostics beside the bounds, neither a bound: `crowded path` decodes
every chain at the step latency of a KV-full replica instead of alone; `KV-limited work` is the
work bound with each role's batch limited by the KV its sequences really hold. `--tails` adds,
per measured step of the first seed, when its rollouts and judges finished after its prompts
were released (50/99/100%) beside its longest chain run alone, and the three samples judged
last: their rollout's and judge's run time against alone, and the judge's queueing.
`--band` adds each variant over the first at the cost model's slow and fast corners
(pivot/sim/band.py; seed 0 unless `--band-seeds`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import sys
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_sim import add_band_args  # the band's flags, alike in every tool

from configs.presets import paper_preset
from pivot.config import PivotConfig
from pivot.sched import Role
from pivot.sim import HARDWARE, SimOptions, SimResult, Workload
from pivot.sim.band import CORNERS, options_at
from pivot.sim.costs import RoleCosts
from pivot.sim.deploy import Allocation, deployment
from pivot.sim.report import (
    bound_s,
    breakdown,
    chain_s,
    context_sums,
    critical_path_s,
    measured_chains,
    role_work_s,
    work_bound_s,
)
from pivot.sim.simulator import Simulator
from pivot.sim.window import DEFAULT_SEEDS, Spread, aligned_window
from pivot.sim.workload import SimSample


# The diagnostics beside the bounds, neither a bound: `crowded path` (every chain decoded at a
# KV-full replica's step latency), `KV-limited work` (the work bound with each role's batch limited
# by the KV its sequences really hold), and the shift-ups that came back soon after a shift-down of
# the same role.
def shift_ups(res: SimResult, within_s: float = 30.0) -> tuple[int, int]:
    """Shift-ups of an inference role in the measured window, and how many of them came within
    `within_s` after a shift-down of the same role (a replica shifted out and another back)."""
    infer = [e for e in res.shifts if e.role != Role.TRAIN]
    downs = [e for e in infer if not e.up]
    ups = [e for e in infer if e.up and e.t_start >= res.window_start_s]
    back = sum(
        any(d.role == u.role and 0 <= u.t_start - d.t_start <= within_s for d in downs) for u in ups
    )
    return len(ups), back


def _full_step_s(c: RoleCosts, lens: list[float], headroom: float) -> float:
    """Step latency of a replica whose KV is full up to its headroom, holding sequences of the
    mean of `lens` (what a throughput-maximising dispatch makes of every replica in a burst)."""
    tok = (1 - headroom) * c.kv_capacity
    n = max(1, min(c.max_running, int(tok // max(sum(lens) / len(lens), 1))))
    return c.throughput.latency(n, int(tok))


def crowded_path_s(res: SimResult, headroom: float = 0.1) -> float:
    """`critical_path_s` with every chain decoded at a full replica's step latency instead of
    alone: the dependency bound a run cannot beat while it keeps its replicas full."""
    ro, rm = res.costs.roles[Role.ROLLOUT], res.costs.roles[Role.REWARD]
    end: list[float] = list(res.step_end_s[: res.warmup_steps])
    for st in range(res.warmup_steps, res.steps):
        ss = res.samples[st]
        l_ro = _full_step_s(ro, [s.prompt_len + s.response_len / 2 for s in ss], headroom)
        l_rm = _full_step_s(rm, [s.judge_prompt_len + s.judge_len / 2 for s in ss], headroom)
        longest = max(
            ro.prefill_s_per_token * s.prompt_len
            + s.response_len * l_ro
            + rm.prefill_s_per_token * s.judge_prompt_len
            + s.judge_len * l_rm
            for s in ss
        )
        release = end[st - res.staleness - 1] if st - res.staleness - 1 >= 0 else 0.0
        end.append(max(end[-1] if end else 0.0, release + longest) + res.train_s[st])
    return end[-1] - res.window_start_s


def kv_work_bound_s(res: SimResult, headroom: float = 0.1) -> float:
    """`work_bound_s` with each role's batch limited by the KV its sequences really hold: a
    decoded token sees on average contexts / tokens of KV per running sequence, so a replica
    runs at most (1 - headroom) * KV / that many sequences, not KV / the shortest prompt."""
    work: dict[str, float] = {}
    for role in (Role.ROLLOUT, Role.REWARD):
        c = res.costs.roles[role]
        chains, prefill = measured_chains(res, role)
        contexts, tokens = context_sums(chains)
        batch = max(1, min(c.max_running, int((1 - headroom) * c.kv_capacity * tokens / contexts)))
        work[role] = role_work_s(c, batch, chains, prefill)
    train = sum(res.train_s[res.warmup_steps : res.steps])
    t_dev = len(res.table.replicas[res.table.train_rid].devices)
    # under Pivot every device may run every role: the cluster, or training alone
    return max(train, (sum(work.values()) + t_dev * train) / res.table.world)


# --tails: what the simulator's sequences do, recorded as they go (a `SequenceWatch`), and the
# per-step lines printed from it (diagnostics only).
class Probe:
    """When each step's prompts were released and when each of its rollouts and judges first ran
    and finished (pivot/sim/sequences.py `SequenceWatch`; diagnostics only)."""

    def __init__(self) -> None:
        self.released_at: dict[int, float] = {}
        self.first_run: dict[int, float] = {}  # sid -> first dispatch
        self.sample_t: dict[tuple[str, int, int], tuple[float, float]] = {}  # first run, finish
        self.done_at: dict[tuple[str, int], list[float]] = {}

    def released(self, step: int, now: float) -> None:
        self.released_at[step] = now

    def dispatched(self, sid: int, now: float) -> None:
        self.first_run.setdefault(sid, now)

    def finished(self, role: str, sample: SimSample, sid: int, now: float) -> None:
        self.sample_t[(str(role), sample.step, sample.index)] = (self.first_run.pop(sid, now), now)
        self.done_at.setdefault((str(role), sample.step), []).append(now)


def run(cfg: PivotConfig, opts: SimOptions) -> tuple[SimResult, Probe]:
    probe = Probe()
    return Simulator(cfg, opts, watch=probe).run(), probe


def tails(res: SimResult, sim: Probe) -> None:
    ro, rm = res.costs.roles[Role.ROLLOUT], res.costs.roles[Role.REWARD]
    for st in range(res.warmup_steps, res.steps):
        rel = sim.released_at[st]
        chain = max(
            chain_s(ro, s.prompt_len, s.response_len) + chain_s(rm, s.judge_prompt_len, s.judge_len)
            for s in res.samples[st]
        )
        r_done = sorted(sim.done_at[("rollout", st)])
        j_done = sorted(sim.done_at[("reward", st)])
        n = len(j_done)
        train_start = res.step_end_s[st] - res.train_s[st]
        print(
            f"    step {st}: released {rel:7.1f}  rollouts 50/99/100% +{r_done[n // 2] - rel:5.1f}"
            f"/{r_done[int(n * 0.99)] - rel:5.1f}/{r_done[-1] - rel:5.1f}  judges 50/99/100% "
            f"+{j_done[n // 2] - rel:5.1f}/{j_done[int(n * 0.99)] - rel:5.1f}/{j_done[-1] - rel:5.1f}"
            f"  chain alone {chain:5.1f}  train {train_start - rel:+6.1f}..{res.step_end_s[st] - rel:+6.1f}"
        )
        last = sorted(res.samples[st], key=lambda s: sim.sample_t[("reward", st, s.index)][1])[-3:]
        for s in last:
            r0, r1 = sim.sample_t[("rollout", st, s.index)]
            j0, j1 = sim.sample_t[("reward", st, s.index)]
            print(
                f"      late sample: rollout {s.response_len:5d} tok run +{r0 - rel:5.1f}..+{r1 - rel:5.1f}"
                f" (alone {chain_s(ro, s.prompt_len, s.response_len):5.1f})  judge {s.judge_len:5d} tok"
                f" queued {j0 - r1:5.1f} run ..+{j1 - rel:5.1f} ({(j1 - j0) / s.judge_len * 1e3:.1f} ms/tok,"
                f" alone {chain_s(rm, s.judge_prompt_len, s.judge_len):5.1f} s)"
            )


GROUPS = ("qwen2.5-1.5b+glm-z1-9b", "qwen2.5-7b+qwen3-30b-a3b")
TUNED_TRAIN = {  # PivotRL's tuned training slot (docs/simulator_cost_model.md; 7B: the preset's)
    "qwen2.5-1.5b+glm-z1-9b": 8,
    "qwen2.5-7b+qwen3-30b-a3b": 8,
    "qwen2.5-32b+qwen3-30b-a3b": 32,
}


def _kv(cfg: PivotConfig) -> None:
    cfg.planner.kv_migration = True


def _no_kv(cfg: PivotConfig) -> None:
    cfg.planner.kv_migration = False


def _no_refill(snap: object, rids: object, share: float = 1.0) -> dict[int, float]:
    return {}


def _kv_device(opts: SimOptions) -> SimOptions:
    return dataclasses.replace(opts, kv_from_engine=False)


@dataclasses.dataclass(frozen=True)
class Variant:
    """A config override, a simulator-options override, and a function replaced for the run
    where neither expresses it."""

    override: Callable[[PivotConfig], None] = lambda cfg: None
    patch: tuple[str, Callable[..., object]] | None = None
    options: Callable[[SimOptions], SimOptions] = lambda opts: opts


VARIANTS: dict[str, Variant] = {
    "base": Variant(_kv),
    "no-kv": Variant(_no_kv),
    # the paper's phi = tau_shift * T_i: the discarded KV's re-prefill left out of the penalty
    "paper-phi": Variant(patch=("pivot.plan.pairs.refill_s", _no_refill)),
    # every replica's KV all the memory its weights leave, not its engine's kv_capacity_tokens
    "kv-device": Variant(options=_kv_device),
}
"""Variants on top of `base`; a policy to try goes here (the ones tried, with their results:
docs/toward_the_bound.md)."""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", nargs="+", default=list(GROUPS))
    ap.add_argument("--hardware", nargs="+", default=["h20", "h200"], choices=sorted(HARDWARE))
    ap.add_argument("--seeds", type=int, nargs="+", default=list(DEFAULT_SEEDS))
    ap.add_argument(
        "--variants",
        nargs="+",
        default=["base"],
        help=f"each a '+'-joined set of: {', '.join(VARIANTS)} (ratios: over the first)",
    )
    ap.add_argument("--train", type=int, default=None, help="training slot (default: tuned)")
    ap.add_argument("--steps", type=int, default=None, help="default: the aligned window's")
    ap.add_argument("--warmup", type=int, default=None)
    ap.add_argument("--tails", action="store_true")
    ap.add_argument(
        "--prompts", type=int, default=None, help="prompts per step (default: 4 per device)"
    )
    ap.add_argument("--group-size", type=int, default=16)
    add_band_args(
        ap, "also each variant over the first at the cost model's slow and fast corners", [0]
    )
    args = ap.parse_args()
    t0 = time.perf_counter()
    for g in args.groups:
        base = paper_preset(g)
        w = aligned_window(base.train.staleness)
        steps = args.steps or w.steps
        warmup = w.warmup if args.warmup is None else args.warmup
        train = args.train or TUNED_TRAIN.get(g, base.train.devices)
        for hw in args.hardware:
            opts = SimOptions(
                hardware=HARDWARE[hw],
                steps=steps,
                warmup_steps=warmup,
                workload=Workload(prompts_per_step=args.prompts, group_size=args.group_size),
            )
            print(
                f"{g} on {hw}: pivot T{train}, steps {warmup}..{steps - 1}, KV migration on, "
                "replica KV the engine's kv_capacity_tokens"
            )
            runs: dict[str, list[SimResult]] = {}
            for v in args.variants:
                runs[v] = []
                for seed in args.seeds:
                    res, sim = run_variant(base, train, v, seed, opts)
                    runs[v].append(res)
                    b, kind = bound_s(res)
                    cp, wk = critical_path_s(res), work_bound_s(res)
                    crowd = crowded_path_s(res, opts.kv_headroom)
                    kvw = kv_work_bound_s(res, opts.kv_headroom)
                    ref = runs[args.variants[0]]
                    rat = (
                        f"  x{res.throughput / ref[len(runs[v]) - 1].throughput:.3f}"
                        if ref is not runs[v]
                        else ""
                    )
                    ups, back = shift_ups(res)
                    print(
                        f"  {v:12s} seed {seed}: {res.throughput:9,.0f} tok/s  bound ({kind}) "
                        f"{b / res.measured_s:4.0%} (path {cp / res.measured_s:.0%}, "
                        f"work {wk / res.measured_s:.0%}; crowded path {crowd / res.measured_s:.0%}, "
                        f"KV-limited work {kvw / res.measured_s:.0%})"
                        f"  shift-ups {ups} ({back} within 30 s of one down)  aborts {res.aborts}"
                        f"  re-prefilled {res.reprefill_tokens / 1e6:.1f}M{rat}  "
                        f"[{res.wall_s:.0f} s]\n    {breakdown(res).line()}",
                        flush=True,
                    )
                    if args.tails and seed == args.seeds[0]:
                        tails(res, sim)
                if v != args.variants[0]:
                    r = Spread.of(
                        a.throughput / b.throughput for a, b in zip(runs[v], runs[args.variants[0]])
                    )
                    print(f"  {v:12s} over {args.variants[0]}: {r.fmt('.3f', 'x')}", flush=True)
            if args.band and len(args.variants) > 1:
                print(f"  band: {band(base, train, args, opts)}", flush=True)
    print(f"total wall {time.perf_counter() - t0:.0f} s")


def run_variant(
    base: PivotConfig, train: int, v: str, seed: int, opts: SimOptions
) -> tuple[SimResult, Probe]:
    """PivotRL at training slot `train` under the '+'-joined variant `v`, one seed."""
    cfg = deployment(base, "pivot", Allocation(train))
    parts = v.split("+")
    bad = [p for p in parts if p not in VARIANTS]
    if bad:
        raise SystemExit(f"--variants {v}: unknown {', '.join(bad)}")
    chosen = [VARIANTS["base"], *(VARIANTS[p] for p in parts)]
    for variant in chosen:
        variant.override(cfg)
        opts = variant.options(opts)
    cfg.seed = seed
    with contextlib.ExitStack() as patches:
        for variant in chosen:
            if variant.patch:
                patches.enter_context(mock.patch(*variant.patch))
        return run(cfg, opts)


def band(base: PivotConfig, train: int, args: argparse.Namespace, opts: SimOptions) -> str:
    """Each variant over the first at the cost model's slow and fast corners (pivot/sim/band.py),
    mean over the band's seeds."""
    parts = []
    for c in CORNERS:
        at = options_at(opts, c)
        tps = {
            v: [run_variant(base, train, v, seed, at)[0].throughput for seed in args.band_seeds]
            for v in args.variants
        }
        first = tps[args.variants[0]]
        parts += [
            f"{v} over {args.variants[0]} at {c} "
            f"x{sum(a / b for a, b in zip(tps[v], first)) / len(first):.3f}"
            for v in args.variants[1:]
        ]
    return f"{', '.join(parts)} (seeds {' '.join(map(str, args.band_seeds))})"


if __name__ == "__main__":
    main()
