"""What a simulated run could at best have done, and where its device time went.

Critical-path bound. A sequence decodes at most one token per replica step, and a step is
shortest when the sequence runs alone: `A * len + max(B, C) + D` (the throughput model at one
sequence), after its prefill. So a sample's rollout + judge chain takes at least

    chain = prefill_ro(p) + sum_{k<r} L_ro(p + k) + prefill_rm(q) + sum_{k<j} L_rm(q + k)

(p, r: prompt and response; q, j: the judge's prompt and response). Step s's prompts are
released when step s - staleness - 1 has trained (at 0 for the first steps), its batch trains
once its longest chain is done, and steps train one after another for `train_s` each:

    end[s] = max(end[s-1], end[s-staleness-1] + max chain of step s) + train_s[s]

No deployment with that staleness and that training pool can finish sooner, however many
devices it has or how it shifts them (shift costs and queueing only add). With a warm-up
(steady-state window) the warm-up steps keep the ends the run gave them and the recurrence
bounds the measured steps from there. `critical_path_s / measured_s` is the fraction of the
bound a run reached.

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


def chain_s(c: RoleCosts, prompt: int, out: int) -> float:
    """Least time to prefill `prompt` tokens and decode `out` tokens alone on one replica."""
    m = c.throughput
    return c.prefill_s_per_token * prompt + out * m.latency(1, prompt) + m.A * out * (out - 1) / 2


def critical_path_s(res: SimResult) -> float:
    """The time below which no run of these steps with this staleness and training can finish
    the measured window (after the warm-up steps as they ran)."""
    ro, rm = res.costs.roles[Role.ROLLOUT], res.costs.roles[Role.REWARD]
    end: list[float] = list(res.step_end_s[:res.warmup_steps])
    for st in range(res.warmup_steps, res.steps):
        longest = max(chain_s(ro, s.prompt_len, s.response_len) + chain_s(rm, s.judge_prompt_len, s.judge_len)
                      for s in res.samples[st])
        release = end[st - res.staleness - 1] if st - res.staleness - 1 >= 0 else 0.0
        end.append(max(end[-1] if end else 0.0, release + longest) + res.train_s[st])
    return end[-1] - res.window_start_s


def shift_ups_per_step(res: SimResult) -> float:
    """Inference replicas brought up from the window's start on, per measured step."""
    ups = sum(1 for ev in res.shifts if ev.up and ev.role != Role.TRAIN and ev.t_start >= res.window_start_s)
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

        parts = [f"{role} {pct(t.busy)}/{pct(t.idle)}/{pct(t.shifting)}" for role, t in self.roles.items()]
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
