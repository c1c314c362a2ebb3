"""Tiny random models for the engine tests, built on the fly; the sglang stand-in installed as
`sglang` (`fake_sglang`); one run of the vLLM driver per session (`vllm_record`: starting a
vLLM engine takes over a minute on CPU), read by the conformance suite and tests/engine/test_vllm.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest
import torch
from filelock import FileLock

from pivot.model import CausalLM, ModelArgs, save_pretrained
from tests.conftest import ROOT
from tests.engine import fake_sglang as fake_module
from tests.engine.fake_sglang import FakeSglang

TOKENIZER = ROOT / "pivot" / "tiny" / "weights" / "tokenizer.json"

EOS = 1


def tiny_args(family: str = "qwen2", vocab: int = 96, tie: bool = False) -> ModelArgs:
    moe = (
        {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32}
        if family == "qwen3_moe"
        else {}
    )
    return ModelArgs(
        family=family,
        vocab_size=vocab,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=256,
        tie_word_embeddings=tie,
        eos_token_id=EOS,
        **moe,
    )


def make_model(path: Path, family: str = "qwen2", seed: int = 0, tie: bool = False) -> CausalLM:
    torch.manual_seed(seed)
    model = CausalLM(tiny_args(family, tie=tie)).eval()
    with torch.no_grad():  # sharper logits than default init, so greedy has clear winners
        model.lm_head.weight.mul_(4.0)
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    save_pretrained(model, path)
    return model


@pytest.fixture(scope="session")
def tiny_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny_qwen2")
    make_model(path)
    return path


def prompts(n: int, seed: int = 0, lo: int = 3, hi: int = 20) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(lo, hi, (n,), generator=g).tolist()
    return [torch.randint(2, 96, (k,), generator=g).tolist() for k in lens]


def run_all(engine, max_steps: int = 10_000) -> dict:
    """Step until idle; {id: Output}."""
    outs = {}
    for _ in range(max_steps):
        if not engine.has_work():
            return outs
        for o in engine.step():
            outs[o.id] = o
    raise AssertionError("engine did not finish")


@pytest.fixture
def fake_sglang(monkeypatch: pytest.MonkeyPatch) -> type[FakeSglang]:
    """`import sglang` finds the stand-in (tests/engine/fake_sglang.py) for this test."""
    module = ModuleType("sglang")
    module.Engine = FakeSglang
    monkeypatch.setitem(sys.modules, "sglang", module)
    io_struct = ModuleType("sglang.srt.managers.io_struct")
    io_struct.PauseGenerationReqInput = fake_module.PauseGenerationReqInput
    io_struct.ContinueGenerationReqInput = fake_module.ContinueGenerationReqInput
    for name in ("sglang.srt", "sglang.srt.managers"):
        monkeypatch.setitem(sys.modules, name, ModuleType(name))
    monkeypatch.setitem(sys.modules, "sglang.srt.managers.io_struct", io_struct)
    monkeypatch.setattr(FakeSglang, "built", [])
    monkeypatch.setattr(FakeSglang, "has_weights_by_name", True)
    return FakeSglang


def tiny_model(path: Path, seed: int, tied: bool = True, base: Path | None = None) -> Path:
    """A random Qwen2-family model vLLM's CPU attention takes (head_dim 32); with `base`, that
    model's weights moved far enough that greedy tokens change."""
    args = ModelArgs(
        family="qwen2",
        vocab_size=284,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=1024,
        tie_word_embeddings=tied,
        attention_bias=True,
    )
    torch.manual_seed(seed)
    model = CausalLM(args)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(std=0.2)
        if base is not None:
            old = CausalLM(args)
            old.load_state_dict(torch.load(base / "state.pt"), strict=False)
            for p, q in zip(model.parameters(), old.parameters()):
                p.copy_(q + 0.5 * p)
    save_pretrained(model, path, TOKENIZER)
    torch.save(model.state_dict(), path / "state.pt")
    return path


def run_driver(python: Path, script: str, *args: str, timeout: float = 900) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [str(python), str(ROOT / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="session")
def vllm_weights(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two weights of one vLLM-shaped model, the second far enough that greedy tokens change."""
    root = tmp_path_factory.mktemp("vllm_models")
    w0 = tiny_model(root / "w0", seed=0)
    return w0, tiny_model(root / "w1", seed=1, base=w0)


def once_per_run(
    tmp_path_factory: pytest.TempPathFactory, name: str, compute: Callable[[], dict]
) -> dict:
    """`compute()`'s JSON record, computed once per test run: each xdist worker is a session of
    its own, so the first to ask computes it (under a lock in the workers' shared temp folder)
    and the others read its record. The CI saw both workers run each vLLM driver, two vLLM
    engines slowing every test beside them, and the bf16 tier's for 130-150 s each."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    record = shared / f"{name}.json"
    with FileLock(f"{record}.lock"):
        if not record.is_file():
            record.write_text(json.dumps(compute()))
        return json.loads(record.read_text())


@pytest.fixture(scope="session")
def vllm_record(
    vllm_python: Path, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> dict:
    """What tests/engine/vllm_driver.py saw vLLM's CPU build do, once per test run."""

    def drive() -> dict:
        w0, w1 = request.getfixturevalue("vllm_weights")
        return run_driver(vllm_python, "tests/engine/vllm_driver.py", str(w0), str(w1))

    return once_per_run(tmp_path_factory, "vllm_record", drive)
