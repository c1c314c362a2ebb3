"""From rewarded groups to a TrainBatch."""

from __future__ import annotations

import math

import pytest

from pivot.rl.batch import TrainBatch, batch_from_groups
from pivot.rl.buffer import Sample, SampleBuffer
from pivot.rl.data import Prompt


def test_batch_from_groups_advantages_and_tokens() -> None:
    buf = SampleBuffer(group_size=2)
    keys = buf.add_prompts(0, [Prompt(0, "ab", "1"), Prompt(1, "c", "2")])
    for k, reward in zip(keys, [1.0, 0.0, 0.5, 0.5]):
        buf.on_response(k, [7, 8], [-1.0, -2.0], "x", 0, prompt_ids=[3, 4] if k[1] == 0 else None)
        buf.on_reward(k, reward)
    batch = batch_from_groups(buf.take_batch(0), tokenize=lambda s: [ord(c) for c in s])
    assert batch.prompt_ids == [[3, 4], [3, 4], [99], [99]]
    assert batch.advantages[0] > 0 > batch.advantages[1] and batch.advantages[2:] == [0.0, 0.0]
    assert batch.behaviour_logprobs == [[-1.0, -2.0]] * 4 and batch.response_tokens == 8


def test_batch_validation() -> None:
    with pytest.raises(ValueError, match="advantages has 1 rows"):
        TrainBatch([[1], [2]], [[3], [4]], [0.0])
    with pytest.raises(ValueError, match="behaviour_logprobs row 0: 2 values for 1"):
        TrainBatch([[1]], [[3]], [0.0], [[0.0, 0.0]])
    with pytest.raises(ValueError, match="row 0: empty prompt"):
        TrainBatch([[]], [[3]], [0.0])


def _sample(prompt_id: int, idx: int, reward: float | None, response: list[int]) -> Sample:
    return Sample(
        0,
        prompt_id,
        idx,
        Prompt(prompt_id, "p", "1"),
        response,
        None,
        "x",
        0,
        reward,
        prompt_ids=[1],
    )


def test_ragged_groups_get_advantages_of_their_own_size() -> None:
    groups = [
        [
            _sample(0, 0, 1.0, [5]),
            _sample(0, 1, 0.0, [5]),
            _sample(0, 2, 0.0, [5]),
        ],  # one response dropped
        [_sample(1, 0, 1.0, [5])],  # a group of one: no baseline, no signal
        [
            _sample(2, 0, 0.0, [5]),
            _sample(2, 1, 1.0, [5]),
            _sample(2, 2, 0.0, [5]),
            _sample(2, 3, 1.0, [5]),
        ],
        [_sample(3, 0, 0.7, [5]), _sample(3, 1, 0.7, [])],  # all equal; one empty response
    ]
    batch = batch_from_groups(groups)
    # group 0: mean 1/3, unbiased std sqrt(1/3); group 2: mean 1/2, std sqrt(1/3)
    s = math.sqrt(1 / 3)
    want = [
        (2 / 3) / s,
        (-1 / 3) / s,
        (-1 / 3) / s,
        0.0,
        -0.5 / s,
        0.5 / s,
        -0.5 / s,
        0.5 / s,
        0.0,
        0.0,
    ]
    assert batch.advantages == pytest.approx(want, rel=1e-5)
    assert len(batch) == 10 and batch.rows_with_tokens == 9 and batch.response_tokens == 9
    assert batch_from_groups([]).advantages == []
    with pytest.raises(ValueError, match=r"sample \(0, 3, 0\) has no reward"):
        batch_from_groups([[_sample(3, 0, None, [5])]])
