"""`--model.linear te` builds TE's layers where the model is built: transformer-engine 2.9's
`te.Linear` defaults `device="cuda"` whatever torch.device context is active
(tests/engine/test_te_contract.py pins that default from its source), so Pivot must pass the
device itself, and "meta" while parameters go to meta (`params_on_meta`); the training role
builds the same kind of layers as the inference roles. A fake `transformer_engine.pytorch`
records what it was asked for."""

from __future__ import annotations

import sys
from types import ModuleType

import pytest
import torch
from torch import nn

from pivot.config import ModelConfig, TrainConfig
from pivot.model import ModelArgs
from pivot.model.layers import make_linear
from pivot.model.meta_init import params_on_meta
from pivot.roles.training import TrainingRole


@pytest.fixture
def te_devices(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    asked: list[str] = []

    class Linear(nn.Linear):
        def __init__(
            self, in_features: int, out_features: int, bias: bool = True, device: str = "cuda"
        ) -> None:
            asked.append(str(device))
            super().__init__(
                in_features, out_features, bias=bias, device="cpu" if device == "cuda" else device
            )

    pytorch = ModuleType("transformer_engine.pytorch")
    pytorch.Linear = Linear  # type: ignore[attr-defined]
    package = ModuleType("transformer_engine")
    package.pytorch = pytorch  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "transformer_engine", package)
    monkeypatch.setitem(sys.modules, "transformer_engine.pytorch", pytorch)
    return asked


def test_te_linear_is_built_on_the_active_device_and_on_meta_under_params_on_meta(
    te_devices: list[str],
) -> None:
    make_linear(4, 8, False, "te")
    with torch.device("meta"):
        make_linear(4, 8, False, "te")
    with torch.device("cpu"), params_on_meta():
        layer = make_linear(4, 8, True, "te")
    assert te_devices == ["cpu", "meta", "meta"] and layer.weight.is_meta
    assert "cuda" not in te_devices  # never TE's own default


def test_the_training_role_builds_te_layers_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    import pivot.roles.training as training

    built: list[dict] = []

    class Stop(Exception):
        pass

    def spy(args: ModelArgs, **kwargs: str) -> None:
        built.append(kwargs)
        raise Stop  # the FSDP trainer after it needs a process group; what it was built as is the point

    monkeypatch.setattr(training, "CausalLM", spy)
    args = ModelArgs(
        family="qwen2",
        vocab_size=31,
        hidden_size=16,
        intermediate_size=24,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=8,
    )
    with pytest.raises(Stop):
        TrainingRole(
            args=args,
            group=None,
            train=TrainConfig(),
            model=ModelConfig(linear="te"),
            device="cpu",
            temperature=1.0,
            policy=None,
        ).shift_up({})
    assert built == [{"linear": "te", "attention": "sdpa"}]
