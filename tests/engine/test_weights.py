"""load_weights in place (validated first), read-back, release / resume."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from pivot.engine import Engine, EngineConfig, Request, SamplingParams
from pivot.model import load_state_dict
from tests.engine.conftest import make_model, prompts, run_all

CONFIG = EngineConfig(kv_capacity_tokens=256, block_size=8)


def _greedy(engine: Engine, n: int = 3) -> dict:
    for i, p in enumerate(prompts(n, seed=6)):
        engine.add(Request(i, p, SamplingParams(temperature=0, max_new_tokens=8, ignore_eos=True)))
    return run_all(engine)


@pytest.mark.parametrize("tie", [False, True])
def test_load_weights_in_place_and_read_back(tmp_path: Path, tie: bool) -> None:
    make_model(tmp_path / "a", seed=0, tie=tie)
    make_model(tmp_path / "b", seed=1, tie=tie)
    b_state = load_state_dict(tmp_path / "b")
    engine = Engine.from_pretrained(tmp_path / "a", CONFIG)
    want = _greedy(Engine.from_pretrained(tmp_path / "b", CONFIG))
    k_cache = engine.runner.cache.k
    ptrs = {n: p.data_ptr() for n, p in engine.runner.params.items()}

    engine.load_weights(b_state.items(), version=3)  # an iterable of pairs works too
    assert engine.runner.cache.k is k_cache  # KV cache not reallocated
    assert {
        n: p.data_ptr() for n, p in engine.runner.params.items()
    } == ptrs  # parameters copied in place
    got = _greedy(engine)
    assert {i: o.output_ids for i, o in got.items()} == {i: o.output_ids for i, o in want.items()}
    assert all(o.weights_version == 3 for o in got.values()) and engine.stats().weights_version == 3
    back = engine.named_parameters_hf()
    assert set(back) == set(b_state)
    for name, t in b_state.items():
        torch.testing.assert_close(back[name], t, atol=0, rtol=0)


def test_bad_weights_raise_and_keep_old(tmp_path: Path) -> None:
    make_model(tmp_path / "a", seed=0)
    make_model(tmp_path / "b", seed=1)
    engine = Engine.from_pretrained(tmp_path / "a", CONFIG)
    before = {i: o.output_ids for i, o in _greedy(engine).items()}
    good = load_state_dict(tmp_path / "b")
    name = "model.layers.1.mlp.down_proj.weight"
    missing = {k: v for k, v in good.items() if k != name}
    with pytest.raises(ValueError, match=f"{name}.*missing"):
        engine.load_weights(missing, version=1)
    wrong = dict(good, **{name: good[name][:, :-1]})
    with pytest.raises(ValueError, match=f"{name}.*shape"):
        engine.load_weights(wrong, version=1)
    with pytest.raises(ValueError, match="unexpected tensor 'extra'"):
        engine.load_weights(dict(good, extra=torch.zeros(1)), version=1)
    assert engine.weights_version == 0
    assert {i: o.output_ids for i, o in _greedy(engine).items()} == before


def test_release_resume(tiny_path: Path) -> None:
    engine = Engine.from_pretrained(tiny_path, CONFIG)
    state = engine.named_parameters_hf()
    before = {i: o.output_ids for i, o in _greedy(engine).items()}
    engine.add(Request(7, [3, 4, 5], SamplingParams(temperature=0, max_new_tokens=8)))
    engine.step()
    partials = engine.release()
    assert [r.id for r in partials] == [7] and len(partials[0].output_ids) == 1
    assert engine.runner.cache is None
    assert all(p.numel() == 0 for p in engine.runner.params.values())
    with pytest.raises(RuntimeError, match="resume"):
        engine.step()
    engine.resume()
    engine.load_weights(state, version=5)
    assert {i: o.output_ids for i, o in _greedy(engine).items()} == before
