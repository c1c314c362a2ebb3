"""What a simulated run could at best have done, and where its device time went.

Critical-path bound. A sequence decodes at most one token per replica step, and a step is
shortest when the sequence runs alone: `A * len + max(B, C) + D` (the throughput model at one
sequence), after its prefill. So a sample's rollout + judge chain takes at least

    chain = prefill_ro(p) + sum_{k<r} L_ro(p + k) + prefill_rm(q) + sum_{k<j} L_rm(q + k)

(p, r: prompt and response; q, j: the judge's prompt and response; an agentic episode's rollout
is its turns one after another, each decoding at its grown context, its tool calls' latencies
between them and only the tools' responses prefilled, its earlier context held). Step s's prompts are
released when step s - staleness - 1 has trained (at 0 for the first steps), its batch trains
once its longest chain is done, and steps train one after another for `train_s` each:

    end[s] = max(end[s-1], end[s-staleness-1] + max chain of step s) + train_s[s]

No deployment with that staleness and that training pool can finish sooner, however many
devices it has or how it shifts them (shift costs and queueing only add). With a warm-up
(steady-state window) the warm-up steps keep the ends the run gave them and the recurrence
bounds the measured steps from there. `critical_path_s / measured_s` is the fraction of the
bound a run reached.

Work bound. However the steps overlap, every token must be decoded and every prompt prefilled
somewhere. A decode step of n sequences over tok KV tokens costs `A * tok + max(B, C * n) + D`;
`(max(B, C * n) + D) / n` falls with n, so at most `N` running sequences (the engine's
`max_running_seqs`, or fewer when the KV cannot hold N of the role's shortest prompts) a role's
decode costs at least

    A * sum of every generated token's context + generated tokens * (max(B, C * N) + D) / N

replica-seconds (times `tp` devices), and its prefill at least the prefill of every distinct
shared prefix once plus each prompt's own rest (an agentic episode: each turn a sequence at its
grown context, and its tools' responses prefilled once). Training costs its steps' `train_s` on the
training devices. Each set S of roles needs its work's device-seconds on the devices that could
run a role of S (Pivot and colocated: the whole cluster; a static pool: its devices), so the
window lasts at least max over S of work(S) / devices(S). The two bounds miss different losses:
the critical path ignores queueing (it is tight for small batches), the work bound ignores
dependencies and tails (tight for large ones); `bound_s` is the tighter (larger) of the two,
named "train" when both come down to the training steps back to back on the training slot:
the share of that bound says how busy the slot was, not how well the run used the cluster.
Each bound belongs to one run's allocation: the same deployment at another training slot has
another bound and kind (7B + Qwen3-30B-A3B on H20, PivotRL seed 0: 92% of its train bound at
T8, 57% of its work bound at T16, at the same tokens/s within 1%).
Over a whole run the work bound is strict; over a steady-state window it prices the measured
steps' work, which a window of whole periods holds on average.

Shift-ups per step: the inference roles' replicas brought up in the measured window, per measured
step (Figure 14's shift count; training's slot moves with every step whatever H is).

Device-time breakdown: each role's device-seconds split into busy (decoding, prefilling,
training), idle (up without work) and shifting (its shifts up and down in flight); the devices
of no role at a moment are unassigned. The parts add up to devices x run time.
"""

from __future__ import annotations

from dataclasses import dataclass

from pivot.sched import Role
from pivot.sim.costs import RoleCosts
from pivot.sim.result import SimResult
from pivot.sim.workload import SimSample, Workload


def chain_s(c: RoleCosts, prompt: int, out: int, prefill: int | None = None) -> float:
    """Least time to prefill `prompt` tokens (or `prefill` of them, the rest held) and decode
    `out` tokens after them alone on one replica."""
    m = c.throughput
    new = prompt if prefill is None else prefill
    return c.prefill_s_per_token * new + out * m.latency(1, prompt) + m.A * out * (out - 1) / 2


def rollout_chain_s(c: RoleCosts, s: SimSample) -> float:
    """Least time of `s`'s rollout alone: one answer, or an agentic episode's turns one after
    another with its tool calls between them (each turn prefills only the tool's response)."""
    ep = s.episode
    if ep is None:
        return chain_s(c, s.prompt_len, s.response_len)
    t, context, new = 0.0, s.prompt_len, s.prompt_len
    for k, out in enumerate(ep.turns):
        t += chain_s(c, context, out, new)
        context += out
        if k < len(ep.tools):
            t += ep.tool_s[k]
            context += ep.tools[k]
            new = ep.tools[k]
    return t


def rollout_chains(s: SimSample) -> list[tuple[int, int]]:
    """(context, generated) of each rollout sequence of `s`: its answer, or its episode's turns."""
    ep = s.episode
    if ep is None:
        return [(s.prompt_len, s.response_len)]
    return [(s.prompt_len + ep.context_before(k), out) for k, out in enumerate(ep.turns)]


def critical_path_s(res: SimResult) -> float:
    """The time below which no run of these steps with this staleness and training can finish
    the measured window (after the warm-up steps as they ran)."""
    ro, rm = res.costs.roles[Role.ROLLOUT], res.costs.roles[Role.REWARD]
    end: list[float] = list(res.step_end_s[: res.warmup_steps])
    for st in range(res.warmup_steps, res.steps):
        longest = max(
            rollout_chain_s(ro, s) + chain_s(rm, s.judge_prompt_len, s.judge_len)
            for s in res.samples[st]
        )
        release = end[st - res.staleness - 1] if st - res.staleness - 1 >= 0 else 0.0
        end.append(max(end[-1] if end else 0.0, release + longest) + res.train_s[st])
    return end[-1] - res.window_start_s


def decode_work_s(c: RoleCosts, contexts: float, tokens: int, batch: int) -> float:
    """Least replica-seconds to decode `tokens` whose contexts sum to `contexts`, at most `batch`
    sequences per step."""
    m = c.throughput
    return m.A * contexts + tokens * (max(m.B, m.C * batch) + m.D) / batch


def prefill_tokens_lower(prompts: list[tuple[tuple[tuple[object, int], ...], int]]) -> int:
    """Tokens to prefill for (prefixes, prompt length) pairs when every distinct shared prefix is
    computed once: each prefix key costs its tokens beyond the shorter prefix before it, each
    prompt its tokens beyond its longest prefix."""
    keys: dict[object, int] = {}
    own = 0
    for prefixes, length in prompts:
        before = 0
        for key, n in prefixes:
            n = min(n, length)
            keys.setdefault(key, max(n - before, 0))
            before = max(before, n)
        own += length - before
    return own + sum(keys.values())


def measured_chains(
    res: SimResult, role: Role, workload: Workload | None = None
) -> tuple[list[tuple[int, int]], int]:
    """The measured steps' (prompt, generated) lengths of every `role` sequence, and the fewest
    prompt tokens that must be prefilled for them (each shared prefix once)."""
    workload = workload or res.workload
    steps = range(res.warmup_steps, res.steps)
    samples: list[SimSample] = [s for st in steps for s in res.samples[st]]
    if role == Role.ROLLOUT:
        chains = [c for s in samples for c in rollout_chains(s)]
        prompts = [(workload.rollout_prefixes(s), s.prompt_len) for s in samples]
        tools = sum(s.tool_tokens for s in samples)  # appended to held contexts: prefilled once
        return chains, prefill_tokens_lower(prompts) + tools
    chains = [(s.judge_prompt_len, s.judge_len) for s in samples]
    prompts = [(workload.judge_prefixes(s), s.judge_prompt_len) for s in samples]
    return chains, prefill_tokens_lower(prompts)


def context_sums(chains: list[tuple[int, int]]) -> tuple[float, int]:
    """The sum over generated tokens of the context each attends to, and their count."""
    contexts = sum(out * p + out * (out - 1) / 2 for p, out in chains)
    return contexts, sum(out for _, out in chains)


def role_work_s(
    c: RoleCosts, batch: int, chains: list[tuple[int, int]], prefill_tokens: int
) -> float:
    """Device-seconds of a role's measured work at `batch` running sequences."""
    contexts, tokens = context_sums(chains)
    return c.tp * (
        decode_work_s(c, contexts, tokens, batch) + c.prefill_s_per_token * prefill_tokens
    )


def _pool_devices(res: SimResult, role: str) -> set[int]:
    """Devices that could run `role`: every slot's under Pivot (it may shift any), else the slots
    that were up at some moment of the run (the static pools; colocated's phases)."""
    up = set(res.initial_up) | {ev.rid for ev in res.shifts if ev.up}
    slots = [s for s in res.table.slots(role) if res.mode == "pivot" or s.replica_id in up]
    return {d for s in slots for d in s.devices}


def work_s(res: SimResult, workload: Workload | None = None) -> dict[str, float]:
    """Device-seconds of the measured steps' work per role (rollout, reward: at best batch;
    train: its steps on the training devices)."""
    out = {}
    for role in (Role.ROLLOUT, Role.REWARD):
        c = res.costs.roles[role]
        chains, prefill = measured_chains(res, role, workload)
        shortest = min(p for p, _ in chains) + 1
        batch = max(1, min(c.max_running, c.kv_capacity // shortest))
        out[str(role)] = role_work_s(c, batch, chains, prefill)
    train_devices = len(res.table.replicas[res.table.train_rid].devices)
    out[str(Role.TRAIN)] = train_devices * sum(res.train_s[res.warmup_steps : res.steps])
    return out


def work_bound_s(res: SimResult, workload: Workload | None = None) -> float:
    """The time below which the measured steps' work cannot be done on the devices that could do
    it: max over sets of roles of their work over their devices (and training's own time)."""
    work = work_s(res, workload)
    pools = {role: _pool_devices(res, role) for role in work}
    best = sum(res.train_s[res.warmup_steps : res.steps])
    roles = list(work)
    for mask in range(1, 1 << len(roles)):
        chosen = [r for i, r in enumerate(roles) if mask >> i & 1]
        devices = set().union(*(pools[r] for r in chosen))
        best = max(best, sum(work[r] for r in chosen) / max(len(devices), 1))
    return best


def bound_s(res: SimResult) -> tuple[float, str]:
    """The tighter of the critical-path and the work bound, and which one it is: "train" when
    it is the measured steps' training back to back on the training slot (a training-bound run:
    that time is in both bounds, the critical path's recurrence and the work bound's set
    {train}, equal up to rounding), else "path" or "work"."""
    cp, work = critical_path_s(res), work_bound_s(res)
    bound = max(work, cp)
    if bound <= sum(res.train_s[res.warmup_steps : res.steps]) * (1 + 1e-9):
        return bound, "train"
    return (work, "work") if work > cp else (cp, "path")


def bound_share(res: SimResult) -> float:
    """The share of its own bound a run reached: its tokens/s over the tokens/s of `bound_s` (the
    same tokens over the bound's time), at its own allocation (pools, training slot)."""
    return bound_s(res)[0] / res.measured_s


def shift_ups_per_step(res: SimResult) -> float:
    """Inference replicas brought up from the window's start on, per measured step."""
    ups = sum(
        1
        for ev in res.shifts
        if ev.up and ev.role != Role.TRAIN and ev.t_start >= res.window_start_s
    )
    return ups / (res.steps - res.warmup_steps)


@dataclass(frozen=True)
class RoleTime:
    busy: float
    idle: float
    shifting: float


@dataclass(frozen=True)
class Breakdown:
    total: float
    """Devices x run time."""
    roles: dict[str, RoleTime]
    unassigned: float

    def line(self) -> str:
        def pct(x: float) -> str:
            return f"{100 * x / self.total:4.1f}%"

        parts = [
            f"{role} {pct(t.busy)}/{pct(t.idle)}/{pct(t.shifting)}"
            for role, t in self.roles.items()
        ]
        return " | ".join(parts) + f" | unassigned {pct(self.unassigned)}"


def breakdown(res: SimResult) -> Breakdown:
    lay, end = res.table, res.sim_time_s
    up_since = dict.fromkeys(res.initial_up, 0.0)
    up = dict.fromkeys(range(len(lay.replicas)), 0.0)
    shifting: dict[str, float] = {role: 0.0 for role in (Role.ROLLOUT, Role.REWARD, Role.TRAIN)}
    for ev in sorted(res.shifts, key=lambda e: e.t_start):
        devs = len(lay.replicas[ev.rid].devices)
        shifting[ev.role] += devs * (min(ev.t_end, end) - min(ev.t_start, end))
        if ev.up:
            up_since[ev.rid] = ev.t_end
        elif ev.rid in up_since:
            up[ev.rid] += max(ev.t_start - up_since.pop(ev.rid), 0.0)
    for rid, t0 in up_since.items():
        up[rid] += max(end - t0, 0.0)
    roles = {}
    for role in shifting:
        busy = idle = 0.0
        for r in lay.slots(role):
            devs = len(r.devices)
            b = min(res.busy_s.get(r.replica_id, 0.0), up[r.replica_id])
            busy += devs * b
            idle += devs * (up[r.replica_id] - b)
        roles[str(role)] = RoleTime(busy, idle, shifting[role])
    total = lay.world * end
    used = sum(t.busy + t.idle + t.shifting for t in roles.values())
    return Breakdown(total, roles, max(total - used, 0.0))
