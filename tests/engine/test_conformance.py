"""Every backend behind `InferenceEngine` held to the same rules: the embedded engine, vLLM's CPU
build for real (one engine in its own venv, driven once per session: tests/engine/vllm_driver.py)
and sglang's stand-in (tests/engine/fake_sglang.py, itself checked against sglang's source by
test_sglang_contract.py). Each runs one scenario (tests/engine/conformance.py) through the whole
protocol: admission and refusals, greedy runs, an abort whose partial resumes to the same tokens,
a shift down and up with requests running, new weights in flight, shutdown. Where backends may
differ, they differ as their `Capabilities` say."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pivot.engine import EngineConfig, ParkedEngine, build_engine, capabilities
from pivot.engine.failed import FailedEngine
from pivot.model import load_state_dict
from tests.engine.conformance import MEMBERS, NEW, PROMPTS, UPDATED, greedy, scenario
from tests.engine.conftest import make_model

CONFIG = dict(kv_capacity_tokens=4096, max_running_seqs=8)


def in_process(engine: object, w0: Path, w1: Path) -> dict:
    try:
        got = scenario(engine, load_state_dict(w0), load_state_dict(w1))
    finally:
        engine.shutdown()
    return json.loads(json.dumps(got))  # as the vLLM driver's record arrives: keys are strings


@pytest.fixture(params=["embedded", "sglang", pytest.param("vllm", marks=pytest.mark.slow)])
def seen(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict]:
    """(backend, what the scenario recorded on it)."""
    backend = request.param
    if backend == "vllm":
        return backend, request.getfixturevalue("vllm_record")["conformance"]
    if backend == "sglang":
        request.getfixturevalue("fake_sglang")
        tiny = request.getfixturevalue("tiny_path")  # the stand-in's tokens ignore the weights
        engine = build_engine(tiny, EngineConfig(backend="sglang", **CONFIG))
        return backend, in_process(engine, tiny, tiny)
    make_model(tmp_path / "w0", seed=0)
    make_model(tmp_path / "w1", seed=1)
    engine = build_engine(tmp_path / "w0", EngineConfig(**CONFIG), weights="later")
    return backend, in_process(engine, tmp_path / "w0", tmp_path / "w1")


def test_a_backend_behind_the_engine_protocol(seen: tuple[str, dict]) -> None:
    backend, r = seen
    assert r["missing"] == [] and r["buffers"]
    assert r["idle"] == [False, [], 0]  # nothing to do, nothing made, the weights loaded
    assert r["refused_long"] == r["refused_missing"] == "ValueError"
    assert r["admits"] == [True, False]
    n_tok = sum(len(p) for p in PROMPTS)
    assert r["added"] == {"n_seq": 3, "n_tok": n_tok, "progress": {"0": 0, "1": 0, "2": 0}}
    ref = {rid: out["ids"] for rid, out in r["reference"].items()}
    for out in r["reference"].values():
        assert len(out["ids"]) == len(out["logprobs"]) == NEW and out["reason"] == "length"
        assert out["version"] == 0 and out["starts"] == [[0, 0]]
    assert r["after"]["n_seq"] == 0 and r["after"]["kv_total"] > 0
    assert r["after"]["made"] >= 3 * NEW
    # an abort keeps the tokens made; the partial, added again, ends as if never stopped
    abort = r["abort"]
    assert abort["unknown"] == [999] and not abort["has_work"]
    assert 1 <= len(abort["ids"]) == abort["logprobs"] < NEW
    assert abort["ids"] == ref["1"][: len(abort["ids"])]
    resumed = r["resumed"]
    assert resumed["ids"] == ref["1"] and len(resumed["logprobs"]) == NEW
    assert resumed["version"] == 0 and {v for v, _ in resumed["starts"]} == {0}
    # shift down with requests running and up again: nothing lost, nothing changed
    assert sorted(r["released"]) == ["20", "21"] and min(r["released"].values()) >= 3
    assert not r["released_idle"]
    for rid, out in r["shifted"].items():
        assert out["ids"] == ref[str(int(rid) % 3)], rid
    assert sorted(r["shifted"]) == ["20", "21"]
    # new weights in flight: the request runs on, its tokens from the switch on labelled 1
    assert r["update_kept"] == [True, 1]
    updated = r["updated"]
    (v0, s0), (v1, k) = updated["starts"]
    assert (v0, s0, v1) == (0, 0, 1) and 4 <= k < UPDATED and updated["version"] == 0
    assert len(updated["ids"]) == UPDATED
    assert updated["ids"][: min(k, NEW)] == ref["0"][: min(k, NEW)]
    assert r["after_update"]["starts"] == [[1, 0]] and r["after_update"]["version"] == 1
    # whole weights back only where the backend says it can
    assert (r["whole_weights"] == "") == capabilities(backend).returns_whole_weights
    # salvaged after a "failure": each request with the tokens it had, their log-probs beside
    assert sorted(r["salvaged"]) == ["40", "41"] and r["salvaged_idle"] == [False, {}]
    for ids, logprobs in r["salvaged"].values():
        assert 4 <= len(ids) == logprobs
    ids = r["salvaged"]["40"][0]  # the new weights' greedy run over the same prompt as 31's
    assert ids == r["after_update"]["ids"][: len(ids)]


def test_the_failed_stand_in_holds_what_was_salvaged_and_hands_it_back() -> None:
    held = [greedy(1), greedy(2)]
    held[0].output_ids, held[0].output_logprobs = [7, 8], [-0.1, -0.2]
    failed = FailedEngine(EngineConfig(), held, version=4, error="EngineDeadError: core died")
    assert [m for m in MEMBERS if not hasattr(failed, m)] == []
    failed.add(greedy(3))  # sent before the controller heard: kept
    failed.add(greedy(1))  # an id it holds: the salvaged one (with its tokens) stays
    assert failed.step() == [] and not failed.has_work() and not failed.can_admit(1)
    assert failed.progress() == {1: 2, 2: 0, 3: 0} and failed.stats().n_seq == 3
    aborted = failed.abort([1, 99])
    assert [r.output_ids for r in aborted] == [[7, 8]] and aborted.unknown_ids == [99]
    failed.load_weights({}, version=5)  # nothing serves them: the version stays
    assert failed.weights_version == 4 and failed.weight_buffers() == {}
    assert sorted(r.id for r in failed.release()) == [2, 3] and list(failed.release()) == []
    with pytest.raises(RuntimeError, match="cannot resume"):
        failed.resume()


def test_the_parked_stand_in_implements_the_protocol() -> None:
    parked = ParkedEngine()
    assert [m for m in MEMBERS if not hasattr(parked, m)] == []
    assert parked.step() == [] and not parked.has_work() and parked.progress() == {}
    assert list(parked.release()) == [] and parked.weight_buffers() == {}
    parked.load_weights({}, version=3)  # its Read holds nothing: only the version moves
    assert parked.weights_version == 3 and parked.stats().weights_version == 3
    assert parked.named_parameters_hf() == {} and parked.graphs_capture_s == 0.0
    parked.resume()
    parked.shutdown()
