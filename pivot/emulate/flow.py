"""Response lengths of the emulated run: the simulator's workload (pivot/sim/workload.py), drawn
per sample exactly as the simulator draws them (`step_samples`: step s, sample index
prompt * G + g), divided by the length scale. The engine ignores EOS until the drawn length,
so the long tail of the paper's distributions is present in the real run."""

from __future__ import annotations

from dataclasses import dataclass, field

from pivot.model import TextTokenizer
from pivot.rl.buffer import Key
from pivot.sim.workload import SimSample, Workload, step_samples


@dataclass
class EmulatedLengths:
    """The emulated run's sequence shapes, held by its `RLFlow` (`SequenceShaper`): each training
    sample's rollout and judge lengths drawn from the simulator's workload."""

    tok: TextTokenizer
    """The policy's tokenizer (the judge reads the response with its EOS tokens)."""
    workload: Workload = field(default_factory=Workload)
    length_scale: int = 100
    devices: int = 1
    seed: int = 0
    """The run's seed: a step's lengths are the simulator's draw for it."""
    _drawn: dict[int, list[SimSample]] = field(default_factory=dict)

    def sample_of(self, key: Key) -> SimSample:
        step, prompt, g = key
        if step not in self._drawn:
            self._drawn[step] = step_samples(self.workload, self.seed, step, self.devices)
        return self._drawn[step][prompt * self.workload.group_size + g]

    def real_length(self, paper_tokens: int) -> int:
        return max(1, round(paper_tokens / self.length_scale))

    def params(self, role: str, key: Key, params: dict) -> dict:
        if key[2] < 0:  # held-out evaluation keeps its own lengths
            return params
        s = self.sample_of(key)
        drawn = s.response_len if role == "rollout" else s.judge_len
        return {**params, "max_new_tokens": self.real_length(drawn), "ignore_eos": True}

    def judged(self, key: Key, response: str, response_ids: list[int] | None) -> str:
        """The judge reads every token of the drawn response, as the simulator's GenRM prompt
        holds it: with EOS ignored, the tiny policy writes EOS tokens inside its drawn length,
        which the usual decoding drops (22% of the response tokens on the tiny task)."""
        if key[2] >= 0 and response_ids is not None:
            return self.tok.decode(response_ids, keep_special=True)
        return response


@dataclass(frozen=True)
class PromptShape:
    """The emulated run's real prompts, in real tokens, as the simulator's workload copies them."""

    prompt: float
    """Mean rollout prompt (the tiny task's prompts are all about the same length)."""
    template: int
    """The judge template around the question and the response."""
    prompt_common: int = 0
    """Leading tokens every rollout prompt shares, in whole KV blocks (what the engine can reuse)."""
    judge_common: int = 0
    """Leading tokens every judge prompt shares, in whole KV blocks."""
    judge_question_first: bool = False
    """The judge template puts the question before the response (a group's judges share it)."""


def emulated_workload(
    batch_prompts: int,
    group_size: int,
    shape: PromptShape,
    length_scale: int,
    base: Workload | None = None,
) -> Workload:
    """The simulator's workload for the emulated run: its response and judge distributions, the
    run's batch, and the run's real prompts and judge template in paper tokens."""
    from pivot.sim.workload import LengthDist

    base = base or Workload()
    p = max(1.0, shape.prompt * length_scale)
    return Workload(
        prompt=LengthDist(p, 0.0, int(p) + 1, low=1),
        response=base.response,
        judge=base.judge,
        judge_template_tokens=shape.template * length_scale,
        prompt_common_tokens=shape.prompt_common * length_scale,
        judge_common_tokens=shape.judge_common * length_scale,
        judge_question_first=shape.judge_question_first,
        prompts_per_step=batch_prompts,
        group_size=group_size,
    )
