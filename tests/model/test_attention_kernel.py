"""The whole-sequence attention kernel follows `--model.attention` only: flash-attn is called when
the model is built with attention="flash" (and its errors surface, no fall back to SDPA), and
never when it is not, even with flash-attn importable and half-precision inputs. A fake
`flash_attn` module in sys.modules stands in for the GPU kernel and records its calls."""

from __future__ import annotations

import sys
from types import ModuleType

import pytest
import torch
import torch.nn.functional as F

from pivot.model import CausalLM, ModelArgs


def tiny_args() -> ModelArgs:
    return ModelArgs(
        family="qwen2",
        vocab_size=31,
        hidden_size=16,
        intermediate_size=24,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
    )


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """Causal attention written out: softmax(q k^T / sqrt(d) + causal mask) v, GQA by repetition."""
    rep = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(rep, dim=2).float(), v.repeat_interleave(rep, dim=2).float()
    scores = torch.einsum("bqhd,bkhd->bhqk", q.float(), k) / q.shape[-1] ** 0.5
    t = q.shape[1]
    scores = scores.masked_fill(torch.ones(t, t, dtype=torch.bool).triu(1), float("-inf"))
    return torch.einsum("bhqk,bkhd->bqhd", F.softmax(scores, dim=-1), v).to(q.dtype)


@pytest.fixture
def flash(monkeypatch: pytest.MonkeyPatch) -> list[tuple[tuple[int, ...], dict]]:
    calls: list[tuple[tuple[int, ...], dict]] = []

    def flash_attn_func(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs: object
    ) -> torch.Tensor:
        calls.append((tuple(q.shape), dict(kwargs)))
        return reference_attention(q, k, v)

    module = ModuleType("flash_attn")
    module.flash_attn_func = flash_attn_func  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "flash_attn", module)
    return calls


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sdpa_model_never_calls_flash(flash: list, dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    model = CausalLM(tiny_args()).to(dtype)
    model(torch.randint(0, 31, (2, 5)))
    assert flash == []


def test_flash_model_calls_flash_in_every_attention_layer(flash: list) -> None:
    torch.manual_seed(0)
    sdpa = CausalLM(tiny_args())
    fa = CausalLM(tiny_args(), attention="flash")
    fa.load_state_dict(sdpa.state_dict())
    ids = torch.randint(0, 31, (2, 5))
    out = fa(ids)
    assert flash == [((2, 5, 2, 8), {"causal": True})] * 2
    torch.testing.assert_close(out, sdpa(ids), rtol=1e-4, atol=1e-5)  # same math as the SDPA path


def test_flash_asked_but_absent_is_an_error_not_a_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "flash_attn", None)  # import fails as if not installed
    with pytest.raises(ImportError):
        CausalLM(tiny_args(), attention="flash")(torch.randint(0, 31, (1, 3)))


def test_unknown_attention_kernel_is_refused() -> None:
    with pytest.raises(ValueError, match="attention: 'xformers'"):
        CausalLM(tiny_args(), attention="xformers")


@pytest.mark.gpu
def test_sdpa_model_on_cuda_in_bf16_never_calls_flash(flash: list) -> None:
    model = CausalLM(tiny_args()).to("cuda", torch.bfloat16)
    model(torch.randint(0, 31, (2, 5), device="cuda"))
    assert flash == []
