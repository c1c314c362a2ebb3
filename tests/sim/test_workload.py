"""The simulated workload: the paper's caps, DAPO's batch ratio, clear errors."""

from __future__ import annotations

import pytest

from pivot.sim import Workload
from pivot.sim.workload import step_samples


def test_default_batch_is_dapo_ratio_with_groups_of_16() -> None:
    w = Workload()
    assert (
        w.prompts(128) == 512 and w.prompts(32) == 128 and w.group_size == 16
    )  # DAPO: 512 x 16 on 128 GPUs
    samples = step_samples(w, 0, 0, 8)
    assert len(samples) == 32 * 16
    assert all(
        len({s.prompt_len for s in samples[g * 16 : (g + 1) * 16]}) == 1 for g in range(32)
    )  # a group shares its prompt


def test_lengths_respect_the_papers_caps() -> None:
    samples = [s for st in range(4) for s in step_samples(Workload(), 1, st, 32)]
    assert max(s.prompt_len for s in samples) <= 2048
    assert max(s.response_len for s in samples) == 15360  # the long tail reaches the cap
    assert max(s.judge_len for s in samples) <= 20480
    assert all(s.judge_prompt_len == 200 + s.prompt_len + s.response_len for s in samples)


@pytest.mark.parametrize("field,value", [("prompts_per_step", 0), ("group_size", 0)])
def test_bad_batch_names_the_field(field: str, value: int) -> None:
    with pytest.raises(ValueError, match=f"{field}={value}"):
        Workload(**{field: value})
