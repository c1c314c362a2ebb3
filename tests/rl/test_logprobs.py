"""Response log-probs on packed micro-batches against the padded oracle (tests/rl/padded_reference.py),
and the plan that packs micro-batches by real tokens."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from pivot.model import CausalLM, ModelArgs, from_pretrained
from pivot.rl.logprobs import plan_micro_batches, response_logprobs
from tests.rl.padded_reference import padded_logprobs


class Bigram(torch.nn.Module):
    """logits[t] depend only on token t: easy to compute by hand (its hidden states are one-hot
    tokens, its LM head's weight the transposed table)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lm_head = torch.nn.Linear(5, 5, bias=False)

    @property
    def table(self) -> torch.Tensor:
        return self.lm_head.weight.t()

    def forward(
        self, ids: torch.Tensor, positions: torch.Tensor, attn: object, head: object
    ) -> torch.Tensor:
        return head(torch.nn.functional.one_hot(ids, 5).float(), self.lm_head)  # type: ignore[operator]


def test_response_logprobs_by_hand() -> None:
    m = Bigram()
    prompts, responses = [[1, 2], [3]], [[4], [0, 2, 1]]
    lp, mask = response_logprobs(m, prompts, responses, temperature=2.0, chunk_tokens=2)
    assert lp.shape == (2, 3) and mask.tolist() == [[1, 0, 0], [1, 1, 1]]
    table = (m.table / 2.0).log_softmax(-1)
    assert torch.allclose(lp[0, 0], table[2, 4])
    assert torch.allclose(lp[1], torch.stack([table[3, 0], table[0, 2], table[2, 1]]))
    assert lp[0, 1:].abs().sum() == 0


def gqa_model(family: str = "qwen2") -> CausalLM:
    args = ModelArgs(family=family, vocab_size=61, hidden_size=32, intermediate_size=48,
                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                     **({"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16}
                        if family == "qwen3_moe" else {}))  # fmt: skip
    torch.manual_seed(3)
    model = CausalLM(args)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0.0, 0.2)
    return model


def uneven_rows(seed: int, n: int, vocab: int) -> tuple[list[list[int]], list[list[int]]]:
    """Lengths as GRPO on math makes them: short answers beside a long tail, one empty."""
    rng = random.Random(seed)
    prompts = [[rng.randrange(vocab) for _ in range(rng.randint(1, 9))] for _ in range(n)]
    lengths = [rng.choice([1, 2, 3, 5, 40]) for _ in range(n - 1)] + [0]
    return prompts, [[rng.randrange(vocab) for _ in range(k)] for k in lengths]


def _values_and_gradients(model: torch.nn.Module, fn, chunk: int, prompts, responses):  # type: ignore[no-untyped-def]
    model.zero_grad(set_to_none=True)
    lp, mask = fn(model, prompts, responses, 0.7, "cpu", chunk)
    weights = torch.linspace(-1.0, 1.0, lp.numel()).reshape(lp.shape)  # every token's own weight
    (lp * weights).sum().backward()
    return (
        lp.detach(),
        mask,
        {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None},
    )


@pytest.mark.parametrize("family", ["qwen2", "qwen3_moe"])
@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_packed_equals_padded_in_values_and_gradients(family: str, chunk: int) -> None:
    """fp32, GQA (4 query heads on 2 K/V heads), uneven rows and an empty response: the packed
    path's log-probs and every parameter's gradient equal the padded oracle's to 1e-6, whatever
    the LM head's chunk (1 token, a chunk across rows, all at once)."""
    model = gqa_model(family)
    prompts, responses = uneven_rows(1, 9, model.args.vocab_size)
    lp, mask, grads = _values_and_gradients(model, response_logprobs, chunk, prompts, responses)
    lp0, mask0, grads0 = _values_and_gradients(model, padded_logprobs, chunk, prompts, responses)
    assert torch.equal(mask, mask0)
    assert (lp - lp0).abs().max() < 1e-6
    assert grads.keys() == grads0.keys()
    for name in grads:
        assert (grads[name] - grads0[name]).abs().max() < 1e-6, name


def test_a_hybrid_models_rows_start_from_a_zero_state(tmp_path: Path) -> None:
    """Qwen3.5's Gated DeltaNet layers carry state along a sequence: packed rows must not pass
    it from one row to the next (each equals the padded oracle, which runs rows apart)."""
    pytest.importorskip("transformers")
    from tests.engine.hf_models import save_hf_model

    save_hf_model(tmp_path / "m", "qwen3_5_moe", 0)
    model = from_pretrained(tmp_path / "m").float()
    prompts, responses = uneven_rows(2, 5, model.args.vocab_size)
    with torch.no_grad():
        lp, _ = response_logprobs(model, prompts, responses, 1.0, "cpu", 16)
        lp0, _ = padded_logprobs(model, prompts, responses)
    assert (lp - lp0).abs().max() < 1e-5


def test_plan_micro_batches_counts_real_tokens() -> None:
    plans = plan_micro_batches([4, 4, 4, 4, 9, 2], world=2, budget=8)
    # rank 0 has rows 0, 2, 4: two 4-token rows fit, the 9-token row goes alone
    assert plans[0] == [[0, 2], [4]]
    assert plans[1] == [[1, 3], [5]]
    assert plan_micro_batches([3], world=2, budget=8) == [[[0]], []]
    # a long row beside short ones: padded, 6 x 3 rows would be 18 tokens; packed, 8
    assert plan_micro_batches([6, 1, 1], world=1, budget=8) == [[[0, 1, 2]]]
