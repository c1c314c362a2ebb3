"""tools/bench_bound.py's diagnostics beside the bounds, neither a bound: `crowded path` (every
chain decoded at a KV-full replica's step latency), `KV-limited work` (the work bound with each
role's batch limited by the KV its sequences really hold), and the shift-ups that came back
soon after a shift-down of the same role."""

from __future__ import annotations

from pivot.sched import Role
from pivot.sim import SimResult
from pivot.sim.costs import RoleCosts
from pivot.sim.report import (
    context_sums,
    measured_chains,
    role_work_s,
)


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
