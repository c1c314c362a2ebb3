"""Response log-probs and micro-batch packing."""

from __future__ import annotations

import torch

from pivot.rl.logprobs import plan_micro_batches, response_logprobs


class Bigram(torch.nn.Module):
    """logits[t] depend only on token t: easy to compute by hand."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.table = torch.nn.Parameter(torch.randn(5, 5))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.table[ids]


def test_response_logprobs_right_padding() -> None:
    m = Bigram()
    prompts, responses = [[1, 2], [3]], [[4], [0, 2, 1]]
    lp, mask = response_logprobs(m, prompts, responses, temperature=2.0)
    assert lp.shape == (2, 3) and mask.tolist() == [[1, 0, 0], [1, 1, 1]]
    table = (m.table / 2.0).log_softmax(-1)
    assert torch.allclose(lp[0, 0], table[2, 4])
    assert torch.allclose(lp[1], torch.stack([table[3, 0], table[0, 2], table[2, 1]]))
    assert lp[0, 1:].abs().sum() == 0


def test_plan_micro_batches() -> None:
    plans = plan_micro_batches([4, 4, 4, 4, 9, 2], world=2, budget=8)
    # rank 0 has rows 0, 2, 4: two 4-token rows fit, the 9-token row goes alone
    assert plans[0] == [[0, 2], [4]]
    assert plans[1] == [[1, 3], [5]]
    assert plan_micro_batches([3], world=2, budget=8) == [[[0]], []]
