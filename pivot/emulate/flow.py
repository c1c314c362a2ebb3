"""Response lengths of the emulated run: the simulator's workload (pivot/sim/workload.py), drawn
per sample exactly as the simulator draws them (`step_samples`: step s, sample index
prompt * G + g), divided by the length scale. The engine ignores EOS until the drawn length,
so the long tail of the paper's distributions is present in the real run."""
from __future__ import annotations

from dataclasses import dataclass, field

from pivot.rl.buffer import Key
from pivot.runtime.flow import RLFlow, SeqInfo
from pivot.sim.workload import SimSample, Workload, step_samples


@dataclass
class EmulatedFlow(RLFlow):
    workload: Workload = field(default_factory=Workload)
    length_scale: int = 100
    devices: int = 1
    _drawn: dict[int, list[SimSample]] = field(default_factory=dict)

    def sample_of(self, key: Key) -> SimSample:
        step, prompt, g = key
        if step not in self._drawn:
            self._drawn[step] = step_samples(self.workload, self.cfg.seed, step, self.devices)
        return self._drawn[step][prompt * self.workload.group_size + g]

    def real_length(self, paper_tokens: int) -> int:
        return max(1, round(paper_tokens / self.length_scale))

    def _new_seq(self, role: str, key: Key, prompt_ids: list[int], params: dict, **extra: float) -> SeqInfo:
        if key[2] >= 0:  # a training sample (held-out evaluation keeps its own lengths)
            s = self.sample_of(key)
            drawn = s.response_len if role == "rollout" else s.judge_len
            params = {**params, "max_new_tokens": self.real_length(drawn), "ignore_eos": True}
        return super()._new_seq(role, key, prompt_ids, params, **extra)


def emulated_workload(batch_prompts: int, group_size: int, prompt_tokens: float, judge_template_tokens: float,
                      length_scale: int, base: Workload | None = None) -> Workload:
    """The simulator's workload for the emulated run: its response and judge distributions, the
    run's batch, and the run's real prompt and judge-template lengths in paper tokens (the tiny
    task's prompts are all about the same length)."""
    from pivot.sim.workload import LengthDist

    base = base or Workload()
    p = max(1.0, prompt_tokens * length_scale)
    return Workload(prompt=LengthDist(p, 0.0, int(p) + 1, low=1), response=base.response, judge=base.judge,
                    judge_template_tokens=int(judge_template_tokens * length_scale),
                    prompts_per_step=batch_prompts, group_size=group_size)
