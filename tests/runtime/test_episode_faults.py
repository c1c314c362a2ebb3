"""Multi-turn episodes through the RL flow, the embedded engine serving the tiny tools policy and
the real tool runner with the calculator, greedy: an episode interrupted mid-turn by a shift
(the engine released, its partials continued on another), by an engine failure (its requests
salvaged without K/V) or by a restart (the flow restored from its checkpoint state) finishes
exactly once, with the tokens of the undisturbed run; tool tokens are masked."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

import pytest

from configs.presets import get_preset
from pivot.config import DataConfig, PivotConfig
from pivot.engine import Engine, EngineConfig, Request
from pivot.model import TextTokenizer
from pivot.rl.buffer import SampleBuffer
from pivot.rl.data import PromptCursor
from pivot.runtime.flow.rl_flow import RLFlow
from pivot.runtime.flow.sequences import SeqInfo
from pivot.tiny.task import judge_template, training_set
from pivot.tiny.tools_build import TOOLS_WEIGHTS

pytestmark = pytest.mark.slow

ENGINE = EngineConfig(kv_capacity_tokens=8192, block_size=4, max_running_seqs=64)


def config() -> PivotConfig:
    cfg = get_preset("tiny-tools")
    train = dataclasses.replace(cfg.train, batch_prompts=6, group_size=2, filter_groups=0)
    return cfg.replace(
        data=DataConfig(min_digits=2, max_digits=2, synthetic_size=64),
        rollout=dataclasses.replace(cfg.rollout, temperature=0.0),
        reward=dataclasses.replace(cfg.reward, w_genrm=0.0),  # the verifier's reward: no judge
        train=train,
    )


def new_flow(cfg: PivotConfig) -> RLFlow:
    tok = TextTokenizer.from_pretrained(TOOLS_WEIGHTS / "policy")
    return RLFlow(
        cfg,
        PromptCursor(training_set(cfg.data, cfg.seed)),
        tok,
        tok,
        SampleBuffer(cfg.train.group_size, cfg.train.staleness),
        cfg.train.staleness,
        judge_template(cfg.reward),
    )


Disturb = Callable[[Engine], list[Request]]


def run(flow: RLFlow, engine: Engine, seqs: list[SeqInfo], disturb: Disturb | None) -> RLFlow:
    """Serve `seqs` and what follows until step 0 is rewarded; `disturb` acts once, when some
    turn after the first has made a few tokens: its partials go back to the flow, as the
    controller's do, and continue on a new engine."""
    for info in seqs:
        engine.add(info.request)
    deadline = time.monotonic() + 120
    while not flow.buffer.ready(0):
        assert time.monotonic() < deadline, "the episodes did not finish"
        for out in engine.step():
            for info in flow.on_output(out):
                engine.add(info.request)
        for info in flow.poll_episodes():
            engine.add(info.request)
        later_turns = [s for s in flow.seqs.values() if len(s.request.prompt_ids) > 40]
        if disturb is not None and any(
            engine.progress().get(s.seq_id, 0) >= 3 for s in later_turns
        ):
            partials, engine, disturb = disturb(engine), new_engine(), None
            assert any(len(p.prompt_ids) > 40 and p.output_ids for p in partials)
            for partial in partials:
                flow.on_partial(partial, 0)
                engine.add(flow.seqs[partial.id].request)
        if not engine.has_work():
            time.sleep(0.005)  # the tools' thread answers
    assert disturb is None, "never disturbed"
    return flow


def responses(flow: RLFlow) -> dict:
    groups = flow.buffer.take_batch(0)
    return {s.key: (s.response_ids, s.response_mask, s.turns) for g in groups for s in g}


def new_engine() -> Engine:
    return Engine.from_pretrained(TOOLS_WEIGHTS / "policy", ENGINE)


def shifted(old: Engine) -> list[Request]:
    """The replica shifts down: everything it held comes back with its tokens."""
    return list(old.release())


def failed(old: Engine) -> list[Request]:
    """The engine fails: what it held is salvaged (tokens, no K/V)."""
    return old.salvage()


@pytest.fixture(scope="module")
def undisturbed() -> dict:
    cfg = config()
    flow = new_flow(cfg)
    want = responses(run(flow, new_engine(), flow.fill(0, 1), None))
    flow.close()
    assert any(turns > 1 for _, _, turns in want.values())  # some episodes called the tool
    return want


@pytest.mark.parametrize("disturb", [shifted, failed], ids=["shift", "engine-failure"])
def test_an_episode_interrupted_mid_turn_finishes_once_with_the_same_tokens(
    undisturbed: dict, disturb: Disturb
) -> None:
    flow = new_flow(config())
    got = responses(run(flow, new_engine(), flow.fill(0, 1), disturb))
    flow.close()
    assert got == undisturbed
    assert flow.stats.migrated > 0 and flow.buffer.stats.duplicates_dropped == 0
    for ids, mask, turns in got.values():
        assert len(mask or ids) == len(ids) and (turns == 1) == (mask is None or all(mask))


def test_a_restart_mid_episode_regenerates_it_once_from_the_checkpoint(undisturbed: dict) -> None:
    cfg = config()
    first = new_flow(cfg)
    seqs = first.fill(0, 1)
    e = new_engine()
    for info in seqs:
        e.add(info.request)
    while not any(len(s.request.prompt_ids) > 40 for s in first.seqs.values()):  # a second turn
        for out in e.step():
            first.on_output(out)
        first.poll_episodes()
    state = first.state_dict()  # the checkpoint; then the rank dies with its episodes
    first.close()
    again = new_flow(cfg)
    resubmitted = again.load_state_dict(state)
    got = responses(run(again, new_engine(), resubmitted, None))
    again.close()
    assert got == undisturbed
    assert again.buffer.stats.duplicates_dropped == 0
