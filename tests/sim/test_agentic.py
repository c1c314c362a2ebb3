"""Agentic workloads in the simulator (issue 72, part 7): multi-turn episodes with tool calls.

The draw is deterministic per (seed, step, sample) and follows its distributions; a tool call
leaves the replica idle (the turn is not running while its tool runs) and the next turn resumes
with the grown context, reusing the context it left cached on that replica; the single-answer
default is untouched (its figures: tests/sim/test_docs_guard.py)."""

from __future__ import annotations

import dataclasses
import statistics

import pytest

from pivot.sched import ThroughputModel
from pivot.sim import LengthDist, SimOptions, Simulator, Workload, simulate
from pivot.sim.deploy import Allocation, deployment
from pivot.sim.replica import SimReplica
from pivot.sim.workload import Agentic, Episode, SecondsDist, step_samples
from tests.sim.conftest import SMALL_WORKLOAD, small_cfg


def _samples(w: Workload, seed: int, steps: int = 2) -> list:
    return [s for st in range(steps) for s in step_samples(w, seed, st, 32)]


def test_the_draw_is_deterministic_per_sample_and_keeps_the_steps_own_draws() -> None:
    single, agentic = Workload(), Workload(agentic=Agentic())
    a, b = _samples(agentic, 3), _samples(agentic, 3)
    assert a == b and all(s.episode is not None for s in a)
    assert _samples(agentic, 4) != a
    # each episode from its own generator: drawing one alone gives the same episode
    s = a[777]
    assert Agentic().draw(3, s.step, s.index) == s.episode
    # the step's other draws are the single-answer workload's: same prompts, same judges
    for x, y in zip(a, _samples(single, 3)):
        assert (x.group, x.prompt_len, x.judge_len) == (y.group, y.prompt_len, y.judge_len)
        assert y.episode is None and y.tool_tokens == 0


def test_an_episodes_lengths_follow_its_distributions() -> None:
    ag = Agentic()
    eps = [s.episode for s in _samples(Workload(agentic=ag), 0, steps=3)]
    assert all(ep is not None for ep in eps)
    turns = [len(ep.turns) for ep in eps]  # type: ignore[union-attr]
    assert statistics.median(turns) == ag.turns.median
    assert 1 <= min(turns) and max(turns) <= ag.turns.cap
    per_turn = [t for ep in eps for t in ep.turns]  # type: ignore[union-attr]
    tools = [t for ep in eps for t in ep.tools]  # type: ignore[union-attr]
    latency = [t for ep in eps for t in ep.tool_s]  # type: ignore[union-attr]
    assert statistics.median(per_turn) == pytest.approx(ag.turn_tokens.median, rel=0.06)
    assert statistics.median(tools) == pytest.approx(ag.tool_tokens.median, rel=0.06)
    assert statistics.median(latency) == pytest.approx(ag.tool_latency.median, rel=0.06)
    assert max(latency) <= ag.tool_latency.cap and min(latency) > 0
    assert all(len(ep.tools) == len(ep.tool_s) == len(ep.turns) - 1 for ep in eps)  # type: ignore[union-attr]


def test_the_judge_and_the_trainer_see_the_whole_trajectory() -> None:
    for s in _samples(Workload(agentic=Agentic()), 1, steps=1):
        ep = s.episode
        assert ep is not None
        assert s.response_len == sum(ep.turns) and s.tool_tokens == sum(ep.tools)
        assert s.judge_prompt_len == 200 + s.prompt_len + sum(ep.turns) + sum(ep.tools)
        assert s.train_tokens == s.prompt_len + sum(ep.turns) + sum(ep.tools)
        assert s.tokens == s.train_tokens + s.judge_prompt_len + s.judge_len


def test_bad_episode_records_name_the_problem() -> None:
    with pytest.raises(ValueError, match="SecondsDist"):
        SecondsDist(0.0, 1.0, 30.0)
    with pytest.raises(ValueError, match="Episode"):
        Episode((100, 100), (), ())


# one sample, two turns of 100 tokens, one 30 s tool call appending 50 tokens: no spread
TOY = Agentic(
    turns=LengthDist(2, 0.0, 2, low=1),
    turn_tokens=LengthDist(100, 0.0, 100),
    tool_tokens=LengthDist(50, 0.0, 50),
    tool_latency=SecondsDist(30.0, 0.0, 30.0),
)


class _Watch:
    """Each dispatch: when, and the sequence's prompt then."""

    def __init__(self) -> None:
        self.sim: Simulator | None = None
        self.dispatches: list[tuple[str, float, int]] = []

    def released(self, step: int, now: float) -> None:
        pass

    def dispatched(self, sid: int, now: float) -> None:
        assert self.sim is not None
        seq = self.sim.work.seqs[sid]
        self.dispatches.append((seq.role, now, seq.prompt_len))

    def finished(self, role: str, sample: object, sid: int, now: float) -> None:
        pass


def test_a_tool_call_leaves_the_replica_idle_and_the_next_turn_resumes_with_its_context() -> None:
    """One rollout replica, one episode: while its tool runs nothing runs on the replica (every
    timeline tick in that window reads no rollout throughput), and the second turn is dispatched
    30 s after the first ended with the prompt grown by the turn and the tool's response; the
    replica reuses the context it kept and prefills only the tool's response."""
    w = dataclasses.replace(SMALL_WORKLOAD, prompts_per_step=1, group_size=1, agentic=TOY)
    opts = SimOptions(workload=w, steps=1, plan_every_s=1.0)
    cfg = deployment(small_cfg(), "disaggregated", Allocation(2, 1))  # one rollout replica
    watch = _Watch()
    sim = Simulator(cfg, opts, watch)
    watch.sim = sim
    res = sim.run()
    (t0, p0), (t1, p1) = [(t, p) for role, t, p in watch.dispatches if role == "rollout"]
    (t_judge,) = [t for role, t, _ in watch.dispatches if role == "reward"]  # as turn 2 ends
    prompt = res.samples[0][0].prompt_len
    assert p0 == prompt and p1 == prompt + 100 + 50
    assert res.tool_calls == 1 and res.tool_s == 30.0
    ro = res.costs.roles["rollout"]
    turn0_end = t1 - 30.0
    assert turn0_end - t0 >= 100 * ro.throughput.latency(1, prompt)  # it decoded 100 tokens first
    idle = [p for p in res.timeline if turn0_end < p.t < t1]
    assert len(idle) >= 25 and all(p.rollout_tps == 0.0 and p.reward_tps == 0.0 for p in idle)
    # the replica computed for all but the tool's 30 s of the episode
    (busy,) = [
        b for rid, b in res.busy_s.items() if b and res.table.replicas[rid].role == "rollout"
    ]
    assert busy == pytest.approx(t_judge - t0 - 30.0, rel=1e-9)
    assert res.resumed_turns == res.resume_hits == 1
    assert res.context_hit_tokens == prompt + 100 - 1  # its KV but the last token's
    assert res.rollout_done[(0, 0)] == 1 and res.reward_done[(0, 0)] == 1


M = ThroughputModel(A=1e-6, B=0.01, C=0.002, D=0.003)


def _replica(cap: int = 10_000) -> SimReplica:
    return SimReplica(0, M, cap, prefill_per_tok=1e-3)


def test_a_parked_context_is_reused_once_on_its_replica() -> None:
    rep = _replica()
    rep.park("ep", 399)  # a turn's 400 tokens of context, its last token not computed
    rep.add(1, 450, 0, 10, 0.0, resume=("ep", 399))  # the next turn: + the tool's 50 tokens
    assert rep.prefilled == 450 - 399 and rep.context_hits == 399 and rep.resume_hits == 1
    assert rep.reprefilled == 0
    assert rep.parked_tok == 0  # the running turn holds it now


def test_a_turn_elsewhere_or_after_a_shift_down_prefills_its_whole_context() -> None:
    other = _replica()
    other.add(1, 450, 0, 10, 0.0, resume=("ep", 399))  # its context is parked on another replica
    assert other.prefilled == 450 and other.reprefilled == 399 and other.resume_hits == 0
    rep = _replica()
    rep.park("ep", 399)
    rep.drop_parked()  # shifted down: the KV is discarded
    rep.add(1, 450, 0, 10, 0.0, resume=("ep", 399))
    assert rep.prefilled == 450 and rep.resumes == 1 and rep.resume_hits == 0


def test_parked_contexts_are_evicted_oldest_first_when_the_running_kv_needs_the_room() -> None:
    rep = _replica(cap=1_000)
    rep.park("old", 300)
    rep.park("new", 300)
    rep.add(1, 500, 0, 10, 0.0)  # 500 running + 600 parked > 1,000: the oldest goes
    assert rep.parked_tok == 300
    rep.add(2, 350, 0, 10, 0.0, resume=("new", 300))
    assert rep.resume_hits == 1 and rep.prefilled == 500 + 350 - 300
    rep.remove(1), rep.remove(2)
    rep.add(3, 350, 0, 10, 0.0, resume=("old", 300))  # evicted at the first admission
    assert rep.resume_hits == 1 and rep.resumes == 2 and rep.reprefilled == 300


@pytest.mark.parametrize("name", ["pivot", "disaggregated", "colocated"])
def test_every_episode_is_generated_judged_and_trained_once(name: str) -> None:
    w = dataclasses.replace(SMALL_WORKLOAD, agentic=Agentic())
    opts = SimOptions(workload=w, steps=2, plan_every_s=2.0)
    res = simulate(
        deployment(small_cfg(), name, Allocation(2, 3) if name == "disaggregated" else None), opts
    )
    keys = {(st, i) for st in range(2) for i in range(16)}
    assert set(res.rollout_done) == keys and set(res.rollout_done.values()) == {1}
    assert set(res.reward_done) == keys and set(res.reward_done.values()) == {1}
    calls = sum(len(s.episode.tools) for st in range(2) for s in res.samples[st])  # type: ignore[union-attr]
    assert res.tool_calls >= calls > 0  # released steps past the last may have called too
    assert res.throughput > 0


def test_the_default_workload_has_no_episodes(opts: SimOptions) -> None:
    assert Workload() == Workload(agentic=None)
    res = simulate(deployment(small_cfg(), "pivot"), opts)
    assert res.tool_calls == 0 and res.resumed_turns == 0
    assert all(s.episode is None for ss in res.samples.values() for s in ss)
