"""The rotary frequency table stays fp32 on every path that builds or casts a model: a bf16 table
is off by whole turns at 4,000 positions (tests/numerics/test_bf16.py measures what that costs)."""

from __future__ import annotations

import torch

from pivot.model import CausalLM, ModelArgs
from pivot.model.meta_init import materialize, params_on_meta

ARGS = ModelArgs(
    family="qwen2",
    vocab_size=32,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=1,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=16,
    rope_theta=1e6,
)


def exact_table() -> torch.Tensor:
    """transformers' default RoPE, written out: 1 / theta^(2i / d) in fp32."""
    i = torch.arange(0, 16, 2, dtype=torch.int64).float()
    return 1.0 / (1e6 ** (i / 16))


def table(model: CausalLM) -> torch.Tensor:
    return model.model.rotary.inv_freq


def test_casting_the_model_casts_its_parameters_but_not_the_rotary_table() -> None:
    for cast in (
        lambda m: m.to(torch.bfloat16),
        lambda m: m.half(),
        lambda m: m.to(dtype=torch.bfloat16, device="cpu"),
    ):
        model = cast(CausalLM(ARGS))
        assert next(model.parameters()).dtype != torch.float32
        assert table(model).dtype == torch.float32
        torch.testing.assert_close(table(model), exact_table(), rtol=0, atol=0)


def test_a_model_built_on_meta_and_materialised_in_bf16_keeps_the_exact_table() -> None:
    with params_on_meta():
        model = CausalLM(ARGS).to(torch.bfloat16)
    materialize(model, "cpu")
    assert table(model).dtype == torch.float32
    torch.testing.assert_close(table(model), exact_table(), rtol=0, atol=0)
    cos, _ = model.model.rotary(torch.tensor([[4000]]))
    want = torch.cos(4000 * exact_table())
    torch.testing.assert_close(cos[0, 0, :8], want, rtol=0, atol=1e-6)
