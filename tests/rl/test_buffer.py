"""Sample buffer: readiness, staleness regeneration, exactly-once, resume."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pivot.rl.buffer import Outcome, SampleBuffer
from pivot.rl.data import Prompt


def prompts(n: int) -> list[Prompt]:
    return [Prompt(id=i, text=f"p{i}", ground_truth=str(i)) for i in range(n)]


def fill(buf: SampleBuffer, keys: list[tuple[int, int, int]], version: int) -> None:
    for k in keys:
        assert buf.on_response(k, [1, 2], [-0.1, -0.2], "r", version) is Outcome.ACCEPTED
        assert buf.on_reward(k, float(k[2])) is Outcome.ACCEPTED


def test_ready_when_all_rewarded_and_batch_shape() -> None:
    buf = SampleBuffer(group_size=3)
    keys = buf.add_prompts(5, prompts(2))
    assert len(keys) == 6 and keys[0] == (5, 0, 0)
    fill(buf, keys[:-1], version=5)
    assert not buf.ready(5) and buf.missing(5) == 1
    with pytest.raises(ValueError, match="1 samples lack a reward"):
        buf.take_batch(5)
    fill(buf, keys[-1:], version=5)
    groups = buf.take_batch(5)
    assert [[s.key for s in g] for g in groups] == [[(5, p, g) for g in range(3)] for p in range(2)]
    assert groups[1][2].reward == 2.0 and groups[0][0].logprobs == [-0.1, -0.2]
    assert buf.stats.trained_samples == 6 and buf.open_steps() == []


def test_staleness_regenerates() -> None:
    buf = SampleBuffer(group_size=1, staleness=2)
    (key,) = buf.add_prompts(7, prompts(1))
    assert buf.can_generate(7, 5) and not buf.can_generate(7, 4)
    assert buf.on_response(key, [1], [0.0], "old", version=4) is Outcome.STALE
    assert buf.stats.regenerated == 1 and buf.pending_keys() == [key]
    assert buf.sample(key).prompt.text == "p0"
    assert buf.on_response(key, [1], [0.0], "fresh", version=5) is Outcome.ACCEPTED
    assert buf.sample(key).version == 5 and buf.sample(key).regenerations == 1


def test_exactly_once() -> None:
    buf = SampleBuffer(group_size=1)
    (key,) = buf.add_prompts(0, prompts(1))
    assert buf.on_reward(key, 1.0) is Outcome.DUPLICATE and buf.stats.orphans_dropped == 1
    assert buf.on_response(key, [1], None, "a", 0) is Outcome.ACCEPTED
    assert buf.on_response(key, [2], None, "b", 0) is Outcome.DUPLICATE  # migrated twice
    assert buf.sample(key).response_ids == [1]
    assert buf.on_reward(key, 1.0) is Outcome.ACCEPTED
    assert buf.on_reward(key, 0.0) is Outcome.DUPLICATE
    buf.take_batch(0)
    assert buf.on_response(key, [3], None, "late", 0) is Outcome.DUPLICATE
    assert buf.on_reward(key, 1.0) is Outcome.DUPLICATE
    assert buf.stats.duplicates_dropped == 4
    with pytest.raises(KeyError, match="unknown"):
        buf.on_response((9, 0, 0), [1], None, "", 9)
    with pytest.raises(ValueError, match="already has prompts"):
        buf.add_prompts(0, prompts(1))
    (k1,) = buf.add_prompts(1, prompts(1))
    with pytest.raises(ValueError, match="2 log-probs for 1"):
        buf.on_response(k1, [1], [0.0, 0.0], "", 1)


def test_state_dict_roundtrip() -> None:
    buf = SampleBuffer(group_size=2)
    k0 = buf.add_prompts(0, prompts(1))
    k1 = buf.add_prompts(1, prompts(2))
    fill(buf, k0, 0)
    buf.take_batch(0)
    buf.on_response(k1[0], [4], [-1.0], "x", 1)
    buf.on_reward(k1[0], 0.5)
    buf.on_response(k1[1], [5], [-1.0], "y", 1)
    state = json.loads(json.dumps(buf.state_dict()))
    again = SampleBuffer(group_size=2)
    again.load_state_dict(state)
    assert again.state_dict() == buf.state_dict()
    assert again.pending_keys() == k1[2:] and again.unrewarded_keys() == [k1[1]]
    assert again.on_reward(k0[0], 1.0) is Outcome.DUPLICATE  # step 0 stays closed
    with pytest.raises(ValueError, match="group_size"):
        SampleBuffer(group_size=3).load_state_dict(state)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.booleans(), st.integers(0, 4)), max_size=60))
def test_each_sample_trained_once(events: list[tuple[int, bool, int]]) -> None:
    """Any interleaving of (possibly repeated) responses and rewards trains each key at most once."""
    buf = SampleBuffer(group_size=2, staleness=1)
    keys = buf.add_prompts(3, prompts(3))
    for idx, is_reward, version in events:
        key = keys[idx]
        if is_reward:
            buf.on_reward(key, 1.0)
        else:
            buf.on_response(key, [1], [0.0], "", version)
    for key in keys:  # finish the step
        buf.on_response(key, [1], [0.0], "", 3)
        buf.on_reward(key, 1.0)
    groups = buf.take_batch(3)
    flat = [s.key for g in groups for s in g]
    assert sorted(flat) == sorted(keys)
    assert all(s.version >= 2 for g in groups for s in g)  # never staler than the bound
