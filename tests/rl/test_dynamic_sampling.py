"""DAPO's dynamic sampling (`train.filter_groups`): a step draws spare groups up front (as many as
the uniform share seen predicts it drops), a group whose rewards are all equal is dropped, and a
fresh prompt is rolled out when the groups left fall short of the batch, at most `filter_groups`
drops per step; the step trains B whole groups, every dropped or surplus sample is counted and
none is trained. Oracle: the
rewards are chosen by the test (the verifier's answer is right or wrong by construction)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pivot.config import DataConfig, PivotConfig, RewardConfig
from pivot.engine import Output
from pivot.model import TextTokenizer
from pivot.rl.buffer import SampleBuffer
from pivot.rl.data import Prompt, PromptCursor, load_dataset
from pivot.runtime.flow.rl_flow import RLFlow
from pivot.runtime.flow.sequences import SeqInfo
from pivot.tiny.task import judge_template
from tests.model.test_tokenizer import QWEN3_TEMPLATE, _write_folder

G = 2


@pytest.fixture(scope="module")
def tok(tmp_path_factory: pytest.TempPathFactory) -> TextTokenizer:
    path = tmp_path_factory.mktemp("tok")
    _write_folder(path, QWEN3_TEMPLATE, None)
    return TextTokenizer.from_pretrained(path)


def make_flow(
    tok: TextTokenizer, tmp_path: Path, limit: int, w_genrm: float = 0.0, metric: str = "reward"
) -> RLFlow:
    path = tmp_path / "d.jsonl"
    path.write_text(
        "".join(json.dumps({"prompt": f"q{i}", "ground_truth": "1"}) + "\n" for i in range(40))
    )
    cfg = PivotConfig(data=DataConfig(path=str(path)), reward=RewardConfig(w_genrm=w_genrm))
    cfg.train.batch_prompts, cfg.train.group_size, cfg.train.filter_groups = 2, G, limit
    cfg.train.filter_metric = metric
    return RLFlow(
        cfg,
        PromptCursor(load_dataset(cfg.data), shuffle=False),
        tok,
        tok,
        SampleBuffer(G, 1),
        1,
        judge_template(cfg.reward),
    )


def answer(f: RLFlow, seq: SeqInfo, right: bool) -> list[SeqInfo]:
    ids = f.policy_tok.encode("Answer: 1" if right else "Answer: 7")
    return f.on_output(Output(seq.seq_id, seq.request.prompt_ids, ids, [0.0] * len(ids), "stop", 0))


def test_spares_are_drawn_up_front_and_uniform_groups_dropped_until_the_limit_then_kept(
    tok: TextTokenizer, tmp_path: Path
) -> None:
    f = make_flow(tok, tmp_path, limit=2)
    assert (
        f.sampling.spare_groups() == 2
    )  # the prior: half the groups uniform, so B * 1/2 / (1 - 1/2)
    first = f.fill(version=0, total_steps=1)
    groups = [first[i : i + G] for i in range(0, len(first), G)]
    assert [[s.key for s in g] for g in groups] == [[(0, p, g) for g in range(G)] for p in range(4)]
    assert answer(f, groups[0][0], True) == [] and answer(f, groups[0][1], False) == []  # mixed
    assert answer(f, groups[1][0], True) == []
    assert answer(f, groups[1][1], True) == []  # all right: dropped, a spare is still there
    assert answer(f, groups[2][0], False) == []
    assert answer(f, groups[2][1], False) == []  # all wrong: the second and last drop
    assert not f.buffer.ready(0)
    assert answer(f, groups[3][0], True) == [] and answer(f, groups[3][1], True) == []  # kept
    assert f.buffer.ready(0)
    _, summary, records = f.batch(0)
    assert sorted({(r["prompt"], r["sample"]) for r in records}) == [(0, 0), (0, 1), (3, 0), (3, 1)]
    assert summary["reward/accuracy"] == 3 / 4  # the trained groups only
    assert summary["rollout/accuracy_sampled"] == 5 / 8  # every response, the dropped groups' too
    assert [r["prompt_row"] for r in records if r["prompt"] == 3] == [3, 3]  # the data's 4th row
    assert f.metrics()["count/groups_dropped"] == 2
    assert f.metrics()["count/groups_surplus"] == 0


def test_a_fresh_group_replaces_a_dropped_one_once_the_spares_run_out(
    tok: TextTokenizer, tmp_path: Path
) -> None:
    f = make_flow(tok, tmp_path, limit=3)
    first = f.fill(version=0, total_steps=1)  # B + 2 spares
    assert len(first) == 4 * G
    for i in range(2):  # two uniform groups: the spares absorb them
        assert answer(f, first[G * i], True) == [] and answer(f, first[G * i + 1], True) == []
    assert answer(f, first[2 * G], True) == []
    fresh = answer(f, first[2 * G + 1], True)  # a third: one group left of two, so a fresh one
    assert [s.key for s in fresh] == [(0, 4, g) for g in range(G)]
    assert answer(f, first[3 * G], True) == [] and answer(f, first[3 * G + 1], False) == []
    assert answer(f, fresh[0], False) == [] and answer(f, fresh[1], True) == []
    _, _, records = f.batch(0)
    assert sorted({r["prompt"] for r in records}) == [3, 4]


def test_groups_a_step_did_not_need_are_surplus_never_trained(
    tok: TextTokenizer, tmp_path: Path
) -> None:
    f = make_flow(tok, tmp_path, limit=2)
    first = f.fill(version=0, total_steps=1)  # 4 groups for a batch of 2
    for i in (3, 1):  # mixed, finishing out of order; groups 0 and 2 still generating
        assert answer(f, first[G * i], True) == [] and answer(f, first[G * i + 1], False) == []
    assert not f.buffer.ready(0)  # group 0 trains whatever finished first: it waits for it
    assert answer(f, first[0], True) == [] and answer(f, first[1], False) == []
    assert f.buffer.ready(0)
    _, _, records = f.batch(0)
    assert sorted({r["prompt"] for r in records}) == [0, 1]  # the lowest live ids
    assert answer(f, first[2 * G], True) == []  # a surplus group's late output: dropped as such
    m = f.metrics()
    assert (m["count/groups_surplus"], m["count/surplus_outputs"]) == (2, 1)
    assert m["count/duplicates_dropped"] == 0 and m["count/groups_dropped"] == 0
    assert not f.verifiable and not f.judgings  # nothing of step 0 kept behind


def test_spares_follow_the_uniform_share_seen(tok: TextTokenizer, tmp_path: Path) -> None:
    f = make_flow(tok, tmp_path, limit=40)
    for _ in range(200):
        f.sampling.saw_group(True)  # nearly every group uniform: up to the limit
    assert f.sampling.spare_groups() == 40
    for _ in range(400):
        f.sampling.saw_group(False)  # none uniform lately: hardly any
    assert f.sampling.spare_groups() == 0
    assert make_flow(tok, tmp_path, limit=0).sampling.spare_groups() == 0  # dynamic sampling off


def judge(f: RLFlow, seq: SeqInfo, verdict: int) -> list[SeqInfo]:
    ids = f.policy_tok.encode(f"Verdict: {verdict}")
    return f.on_output(Output(seq.seq_id, seq.request.prompt_ids, ids, [0.0] * len(ids), "stop", 0))


def test_a_noisy_judge_hides_a_uniform_group_when_filtering_on_the_reward(
    tok: TextTokenizer, tmp_path: Path
) -> None:
    f = make_flow(tok, tmp_path, limit=2, w_genrm=1.0, metric="reward")
    first = f.fill(version=0, total_steps=1)
    judges = [answer(f, s, True)[0] for s in first[:G]]  # both answers right: verifiable 1, 1
    assert judge(f, judges[0], 1) == []
    assert judge(f, judges[1], 0) == []  # rewards 2, 1: looks mixed, trained on the judge's noise
    assert f.metrics()["count/groups_dropped"] == 0


def test_filtering_on_the_verifiable_reward_drops_a_uniform_group_before_judging_it(
    tok: TextTokenizer, tmp_path: Path
) -> None:
    f = make_flow(tok, tmp_path, limit=2, w_genrm=1.0, metric="verifiable")
    first = f.fill(version=0, total_steps=1)
    assert answer(f, first[0], True) == []  # judging waits for the whole group
    assert answer(f, first[1], True) == []  # verifiable 1, 1: dropped (a spare is left), unjudged
    assert f.metrics()["count/groups_dropped"] == 1 and f.stats.rewards_finished == 0
    assert answer(f, first[G], True) == []
    judges = answer(f, first[G + 1], False)  # mixed: both judged, once each
    assert sorted((s.role, s.key) for s in judges) == [("reward", (0, 1, g)) for g in range(G)]
    assert [judge(f, s, 1) for s in judges] == [[], []]


def test_a_group_held_for_judging_resumes_from_a_checkpoint(
    tok: TextTokenizer, tmp_path: Path
) -> None:
    f = make_flow(tok, tmp_path, limit=1, w_genrm=1.0, metric="verifiable")
    seqs = f.fill(version=0, total_steps=1)
    answer(f, seqs[0], True)  # held: its group-mate is still generating
    judges = answer(f, seqs[G], True) + answer(
        f, seqs[G + 1], False
    )  # group 1 released: 2 judgings
    judge(f, judges[0], 1)  # one verdict in before the checkpoint
    g = make_flow(tok, tmp_path, limit=1, w_genrm=1.0, metric="verifiable")
    resubmitted = g.load_state_dict(json.loads(json.dumps(f.state_dict())))
    spare = [("rollout", (0, 2, i)) for i in range(G)]  # the step's one spare group, not started
    expected = [("rollout", (0, 0, 1)), ("reward", judges[1].key), *spare]
    assert sorted((s.role, s.key) for s in resubmitted) == sorted(expected)  # nothing judged twice


def test_off_keeps_every_group(tok: TextTokenizer, tmp_path: Path) -> None:
    f = make_flow(tok, tmp_path, limit=0)
    seqs = f.fill(version=0, total_steps=1)
    assert all(answer(f, s, True) == [] for s in seqs)
    assert f.buffer.ready(0) and f.metrics()["count/groups_dropped"] == 0


def test_a_checkpoint_between_drops_resumes_with_the_same_ids(
    tok: TextTokenizer, tmp_path: Path
) -> None:
    f = make_flow(tok, tmp_path, limit=3)
    seqs = f.fill(version=0, total_steps=1)  # 4 groups: B + 2 spares
    for s in seqs[: 2 * G]:
        answer(f, s, True)  # groups 0 and 1 uniform: dropped
    state = json.loads(json.dumps(f.state_dict()))
    g = make_flow(tok, tmp_path, limit=3)
    resubmitted = g.load_state_dict(state)
    assert sorted(s.key for s in resubmitted) == sorted(s.key for s in seqs[2 * G :])
    assert g.buffer.replaced(0) == 2
    answer(g, next(s for s in resubmitted if s.key == (0, 2, 0)), True)
    more = answer(g, next(s for s in resubmitted if s.key == (0, 2, 1)), True)
    assert [s.key for s in more] == [(0, 4, gi) for gi in range(G)]  # ids are never reused


def test_buffer_drop_then_add_group() -> None:
    buf = SampleBuffer(G, 1)
    buf.add_prompts(0, [Prompt(0, "a", "1"), Prompt(1, "b", "1")])
    with pytest.raises(KeyError, match="no open group 5"):
        buf.drop_group(0, 5)
    buf.drop_group(0, 1)
    assert buf.add_group(0, Prompt(2, "c", "1")) == [(0, 2, 0), (0, 2, 1)]
    assert buf.group_rewards(0, 2) is None
    restored = SampleBuffer(G, 1)
    restored.load_state_dict(json.loads(json.dumps(buf.state_dict())))
    restored.drop_group(0, 2)
    assert restored.add_group(0, Prompt(3, "d", "1")) == [(0, 3, 0), (0, 3, 1)]
    assert restored.stats.groups_dropped == 2
