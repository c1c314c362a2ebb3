"""The vectorised sampler: per-row parameters, batch-independent seeded draws, exact distributions."""

from __future__ import annotations

import math

import pytest
import torch

from pivot.engine.sampler import sample
from pivot.engine.sequence import SamplingParams

LOGITS = torch.tensor([2.0, 1.5, 1.4, 0.3, -0.2, -1.0, 0.9, 0.0])


def _filtered(logits: list[float], temperature: float, top_k: int, top_p: float) -> list[float]:
    """Brute force: softmax at temperature, keep the top-k, renormalise, keep the smallest head
    of the ranking whose mass reaches top_p, renormalise."""
    w = [math.exp(x / temperature) for x in logits]
    ranked = sorted(range(len(w)), key=lambda i: -w[i])[: top_k or len(w)]
    total = sum(w[i] for i in ranked)
    kept, mass = [], 0.0
    for i in ranked:
        if mass >= top_p:
            break
        kept.append(i)
        mass += w[i] / total
    z = sum(w[i] for i in kept)
    return [w[i] / z if i in kept else 0.0 for i in range(len(w))]


def test_frequencies_match_the_filtered_distribution() -> None:
    n = 20_000
    gen = torch.Generator().manual_seed(0)
    for temperature, top_k, top_p in [(1.0, 0, 1.0), (0.7, 4, 1.0), (1.3, 0, 0.8), (1.0, 5, 0.6)]:
        params = [
            SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, seed=s)
            for s in range(n)
        ]
        tokens, logprobs = sample(LOGITS.expand(n, -1), params, [0] * n, gen)
        freq = torch.bincount(torch.tensor(tokens), minlength=len(LOGITS)).double() / n
        want = torch.tensor(
            _filtered(LOGITS.tolist(), temperature, top_k, top_p), dtype=torch.double
        )
        assert torch.all((freq - want).abs() <= 4 * (want * (1 - want) / n).sqrt() + 1e-9), (
            temperature,
            top_k,
            top_p,
        )
        full = torch.log_softmax(LOGITS / temperature, -1)
        assert logprobs == [full[t].item() for t in tokens]  # before truncation


def test_mixed_rows_draw_as_if_alone() -> None:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(5, 30, generator=gen) * 2
    params = [
        SamplingParams(temperature=0),
        SamplingParams(temperature=0.7, top_k=5, seed=3),
        SamplingParams(temperature=1.2, top_p=0.8, seed=4),
        SamplingParams(temperature=1.0),
        SamplingParams(temperature=0.9, top_k=2, top_p=0.5, seed=5),
    ]
    done = [0, 7, 2, 1, 4]
    tokens, logprobs = sample(logits, params, done, gen)
    assert tokens[0] == int(logits[0].argmax())
    assert logprobs[0] == torch.log_softmax(logits[0], -1)[tokens[0]].item()
    for i in (1, 2, 4):
        alone, lp = sample(
            logits[i : i + 1], [params[i]], [done[i]], torch.Generator().manual_seed(9)
        )
        assert alone == [tokens[i]] and lp == [logprobs[i]]
    draws = {sample(logits[2:3], [params[2]], [k], gen)[0][0] for k in range(20)}
    assert len(draws) > 1  # the generated index moves the draw
    assert len(sample(logits[:0], [], [], gen)[0]) == 0


def test_one_read_of_device_values_a_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """Greedy, seeded, top-k and top-p rows together: the tokens and their log-probs come back in
    one host read (each would wait for the GPU), every other choice is made from the requests."""
    reads = []
    for name in ("item", "tolist", "__bool__", "__int__", "__float__", "__index__"):
        method = getattr(torch.Tensor, name)

        def counted(self: torch.Tensor, *a: object, _m: object = method, _n: str = name) -> object:
            reads.append(_n)
            return _m(self, *a)  # type: ignore[operator]

        monkeypatch.setattr(torch.Tensor, name, counted)
    params = [
        SamplingParams(temperature=0),
        SamplingParams(temperature=1.0, seed=5),
        SamplingParams(temperature=0.7, top_k=3),
        SamplingParams(temperature=1.0, top_p=0.5),
    ]
    logits = torch.randn(4, 50, generator=torch.Generator().manual_seed(0))
    tokens, logprobs = sample(logits, params, [0, 3, 1, 2], torch.Generator().manual_seed(1))
    assert reads == ["tolist"]
    assert all(isinstance(t, int) for t in tokens) and len(logprobs) == 4
