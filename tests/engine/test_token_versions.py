"""Every output token carries the weights version that made it: a sequence that spans an in-place
policy update, or an abort resumed on a replica with newer weights, reports each range and its
oldest version, the one the staleness bound is checked against (flow.py's rule)."""

from __future__ import annotations

from pathlib import Path

from pivot.engine import Engine, EngineConfig, Request, SamplingParams
from tests.engine.conftest import make_model


def engine(folder: Path) -> Engine:
    return Engine.from_pretrained(folder, EngineConfig(kv_capacity_tokens=1024, max_running_seqs=4))


def steps(e: Engine, n: int) -> list:
    return [o for _ in range(n) for o in e.step()]


def test_an_update_in_flight_labels_the_tokens_after_it(tmp_path: Path) -> None:
    make_model(tmp_path / "m")
    e = engine(tmp_path / "m")
    weights = {n: t.clone() for n, t in e.named_parameters_hf().items()}
    params = SamplingParams(temperature=0, max_new_tokens=10, ignore_eos=True)
    e.add(Request(1, [3, 4, 5, 6], params))
    assert steps(e, 3) == []  # the prefill step makes token 0, then tokens 1 and 2
    e.load_weights(weights, version=1)  # in place: the sequence keeps its K/V and goes on
    (out,) = steps(e, 7)
    assert out.versions.starts == ((0, 0), (1, 3))
    assert out.weights_version == 0  # the oldest: version 1 (the newest) was reported before


def test_a_partial_carries_its_ranges_to_the_replica_that_resumes_it(tmp_path: Path) -> None:
    make_model(tmp_path / "m")
    a, b = engine(tmp_path / "m"), engine(tmp_path / "m")
    weights = {n: t.clone() for n, t in a.named_parameters_hf().items()}
    b.load_weights(weights, version=2)
    a.add(Request(7, [3, 4, 5], SamplingParams(temperature=0, max_new_tokens=12, ignore_eos=True)))
    steps(a, 2)
    a.load_weights(weights, version=1)
    steps(a, 2)
    (partial,) = a.abort([7])
    assert partial.versions.starts == ((0, 0), (1, 2)) and len(partial.output_ids) == 4
    b.add(partial)
    (out,) = [o for _ in range(20) for o in b.step()]
    assert out.versions.starts == ((0, 0), (1, 2), (2, 4)) and out.weights_version == 0
    assert len(out.output_ids) == 12
