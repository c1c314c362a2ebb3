"""tools/bench_bound.py --tails: a simulator that also records when each step's prompts were
released and when each rollout and judge ran and finished, and the per-step lines it prints
from them (diagnostics only)."""

from __future__ import annotations

from pivot.config import PivotConfig
from pivot.sched import Abort, Command, Role
from pivot.sim import SimOptions, SimResult
from pivot.sim.report import (
    chain_s,
)
from pivot.sim.simulator import Simulator


class Probe(Simulator):
    """The simulator, also recording when each step's prompts were released and when each of its
    rollouts and judges finished (diagnostics only)."""

    def __init__(self, cfg: PivotConfig, opts: SimOptions) -> None:
        super().__init__(cfg, opts)
        self.released_at: dict[int, float] = {}
        self.first_run: dict[int, float] = {}  # sid -> first dispatch
        self.sample_t: dict[tuple[str, int, int], tuple[float, float]] = {}  # first run, finish
        self.done_at: dict[tuple[str, int], list[float]] = {}

    def _fill(self) -> None:
        before = self.next_step
        super()._fill()
        for st in range(before, self.next_step):
            self.released_at[st] = self.now

    def _apply(self, role: str, cmds: list[Command]) -> None:
        for c in cmds:
            if not isinstance(c, Abort):
                self.first_run.setdefault(c.seq_id, self.now)
        super()._apply(role, cmds)

    def _on_finish(self, role: str, sid: int) -> None:
        s = self.seqs[sid].sample
        self.sample_t[(str(role), s.step, s.index)] = (self.first_run.pop(sid, self.now), self.now)
        step = self.seqs[sid].sample.step
        self.done_at.setdefault((str(role), step), []).append(self.now)
        super()._on_finish(role, sid)


def run(cfg: PivotConfig, opts: SimOptions) -> tuple[SimResult, Probe]:
    sim = Probe(cfg, opts)
    return sim.run(), sim


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
