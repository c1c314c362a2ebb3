"""GRPO group advantages against hand values and an exact (Fraction) oracle."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
import torch

from pivot.rl.algo import grpo_advantages


def oracle(group: list[float], normalize_std: bool, eps: float = 1e-6) -> list[float]:
    """Exact mean and variance over the given floats; only the square root is rounded."""
    xs = [Fraction(x) for x in group]
    if len(xs) < 2 or len(set(xs)) == 1:
        return [0.0] * len(xs)
    mean = sum(xs) / len(xs)
    centered = [x - mean for x in xs]
    if not normalize_std:
        return [float(c) for c in centered]
    std = math.sqrt(sum(c * c for c in centered) / (len(xs) - 1))
    return [float(c) / (std + eps) for c in centered]


@pytest.mark.parametrize("value", [0.7, 123.456, 0.1, 1e-7, -3.3, 1e6 + 0.1, 1.0])
@pytest.mark.parametrize("size", [2, 3, 5, 8, 16])
def test_constant_group_is_exactly_zero(value: float, size: int) -> None:
    for dtype in (torch.float32, torch.float64):
        rewards = torch.full((1, size), value, dtype=dtype)
        for normalize_std in (True, False):
            adv = grpo_advantages(rewards, normalize_std=normalize_std)
            assert adv.dtype == torch.float32
            assert torch.equal(adv, torch.zeros(1, size)), (value, size, dtype, adv)


def test_issue_cases_and_mixed_batch() -> None:
    assert torch.equal(grpo_advantages(torch.full((1, 8), 0.7)), torch.zeros(1, 8))
    assert torch.equal(grpo_advantages(torch.full((1, 5), 123.456)), torch.zeros(1, 5))
    r = torch.tensor([[0.7] * 4, [0.0, 1.0, 0.0, 1.0]])
    adv = grpo_advantages(r, eps=0.0)
    s = math.sqrt(1 / 3)  # unbiased std of 0, 1, 0, 1
    assert torch.equal(adv[0], torch.zeros(4))
    assert torch.allclose(adv[1], torch.tensor([-0.5, 0.5, -0.5, 0.5]) / s)


@pytest.mark.parametrize("offset", [0.0, 1e3, 1e6, 123.456])
def test_random_groups_match_exact_oracle(offset: float) -> None:
    rng = random.Random(int(offset) + 7)
    for _ in range(50):
        size = rng.randint(2, 12)
        group = [offset + rng.choice([0.0, 0.25, 0.5, 1.0, rng.random()]) for _ in range(size)]
        for dtype in (torch.float64, torch.float32):
            rewards = torch.tensor([group], dtype=dtype)
            exact = rewards[0].tolist()  # the float32 case: the oracle sees the rounded inputs
            for normalize_std in (True, False):
                got = grpo_advantages(rewards, normalize_std=normalize_std)[0].tolist()
                want = oracle(exact, normalize_std)
                assert got == pytest.approx(want, rel=1e-5, abs=1e-5), (exact, dtype, normalize_std)
