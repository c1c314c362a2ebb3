"""Recovery without a restart (docs/reliability.md): an inference engine that fails inside a live
rank is a forced shift down of its replica (its sequences continue elsewhere from the tokens they
had) and a shift up with a new engine, while the job goes on; a replica that keeps failing stays
down. The controller's bookkeeping, the fault hook, the embedded engine's salvage after a step
that raised, then the main job on 4 CPU ranks with engine steps failing on purpose."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pivot.engine import EngineConfig, Request, SamplingParams, build_engine
from pivot.faults import Fault, parse
from pivot.runtime.control.recovery import EngineRecovery
from pivot.runtime.records.audit import exactly_once
from tests.engine.conftest import make_model
from tests.runtime.test_runtime import B, G, models, torchrun  # noqa: F401  (fixture)


def test_a_failure_brings_the_replica_back_until_the_window_holds_too_many() -> None:
    rec = EngineRecovery(max_failures=2, window_s=10.0)
    rec.failed(3, now=0.0, up=True)
    assert rec.shifted_down(3) is True  # first failure: rebuilt
    assert rec.shifted_up(3, now=1.5) == 1.5 and rec.shifted_up(3, now=2.0) is None
    rec.failed(3, now=20.0, up=True)  # the first has left the window
    assert rec.shifted_down(3) is True and rec.shifted_up(3, now=20.5) == 0.5
    rec.failed(3, now=25.0, up=True)  # two within 10 s: it stays down
    assert rec.shifted_down(3) is False
    rec.failed(4, now=30.0, up=False)  # shifting down already: the planner's shift, not ours
    assert rec.shifted_down(4) is None
    assert rec.counters() == {
        "count/engine_failures": 4,
        "count/engines_rebuilt": 2,
        "count/replicas_retired": 1,
        "recover_s/max": 1.5,
    }


def test_the_fault_hook_reads_its_variable_and_names_a_bad_entry() -> None:
    assert parse("") == []
    assert parse("engine_step:rollout:@3, engine_step:*:0.5") == [
        Fault("engine_step", "rollout", at=3),
        Fault("engine_step", "*", probability=0.5),
    ]
    assert parse("engine_stall:reward:@3:1") == [Fault("engine_stall", "reward", at=3, rank=1)]
    with pytest.raises(ValueError, match="'engine_step:rollout'"):
        parse("engine_step:rollout")
    with pytest.raises(ValueError, match="probability or @N"):
        parse("engine_step:rollout:often")


def test_after_a_step_that_raised_the_salvaged_requests_continue_exactly_elsewhere(
    tmp_path: Path,
) -> None:
    make_model(tmp_path / "m", seed=0)
    cfg = EngineConfig(kv_capacity_tokens=2048, max_running_seqs=8)
    params = SamplingParams(temperature=0, max_new_tokens=10, ignore_eos=True)
    prompts = [[5, 6, 7, 8], [11, 12, 13], [20, 21, 22, 23, 24]]

    def requests() -> list[Request]:
        return [Request(i, list(p), params) for i, p in enumerate(prompts)]

    reference = build_engine(tmp_path / "m", cfg)
    reference.add_all(requests())
    want = {}
    while reference.has_work():
        want.update({o.id: o.output_ids for o in reference.step()})

    failing = build_engine(tmp_path / "m", cfg)
    failing.add_all(requests())
    for _ in range(4):
        failing.step()
    run = failing.runner.run

    def broken(*args: object) -> torch.Tensor:
        run(*args)  # the forward ran; the failure comes before any token is kept
        raise RuntimeError("CUDA error: out of memory (injected)")

    failing.runner.run = broken
    with pytest.raises(RuntimeError, match="out of memory"):
        failing.step()
    salvaged = failing.salvage()
    assert not failing.has_work() and sorted(r.id for r in salvaged) == [0, 1, 2]
    assert all(len(r.output_ids) == len(r.output_logprobs) >= 3 for r in salvaged)
    elsewhere = build_engine(tmp_path / "m", cfg)
    elsewhere.add_all(salvaged)
    got = {}
    while elsewhere.has_work():
        got.update({o.id: o.output_ids for o in elsewhere.step()})
    assert got == want


def _events(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "timeline.jsonl").read_text().splitlines()]
    return [r for r in rows if r.get("kind") == "shift"]


@pytest.mark.slow
def test_engine_failures_in_both_roles_are_recovered_in_place_exactly_once(
    models: tuple[Path, Path],  # noqa: F811  (the fixture)
    tmp_path: Path,
) -> None:
    # every rank that serves a role fails once, at its 8th rollout or 6th judge step: several
    # replicas fail, some while others are down for the same reason; no restart (none allowed).
    # The training ranks say their 3rd micro-batch will not fit: that step splits
    faults = "engine_step:rollout:@8,engine_step:reward:@6,train_oom:train:@3"
    out = torchrun(models, tmp_path, "--train.steps", "4", env={"PIVOT_FAULTS": faults})
    assert exactly_once(tmp_path, 4, B, G).violations == []
    events = _events(tmp_path)
    failed = [e for e in events if e["event"] == "engine_failed"]
    rebuilt = [e for e in events if e["event"] == "engine_rebuilt"]
    assert {e["role"] for e in failed} == {"rollout", "reward"}, failed
    assert len(rebuilt) == len(failed) and all(e["recover_s"] > 0 for e in rebuilt)
    last = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert 1 <= last["count/engine_failures"] <= len(failed)  # the last row: after the last step
    assert last["count/verdict_retries"] > 0  # the random judge writes no verdict: each retried
    assert "engine failures:" in out.stdout and "rebuilt" in out.stdout
    (split,) = [e for e in events if e["event"] == "train_split"]
    assert split["micro_batch_tokens"] == 2048  # half the default, then kept
    assert last["count/train_oom_splits"] == 1 and last["train/micro_batch_tokens"] == 2048
    assert "training steps split to fit device memory: 1" in out.stdout


@pytest.mark.slow
def test_a_replica_that_keeps_failing_stays_down_and_the_job_goes_on(
    models: tuple[Path, Path],  # noqa: F811  (the fixture)
    tmp_path: Path,
) -> None:
    faults = "engine_step:rollout:@5:0"  # rank 0 (rollout0 at start) only: the other slots stay
    out = torchrun(
        models,
        tmp_path,
        "--train.steps",
        "3",
        "--recovery.max-engine-failures",
        "1",
        env={"PIVOT_FAULTS": faults},
    )
    assert exactly_once(tmp_path, 3, B, G).violations == []
    events = _events(tmp_path)
    retired = {(e["role"], e["slot"]): e["time"] for e in events if e["event"] == "replica_retired"}
    failed = {(e["role"], e["slot"]) for e in events if e["event"] == "engine_failed"}
    assert retired and set(retired) <= failed
    back = [
        e
        for e in events
        if e["event"] == "shift_up"
        and (e["role"], e["slot"]) in retired
        and e["time"] > retired[e["role"], e["slot"]]
    ]
    assert back == []  # never planned again
    assert out.stderr.count("stays down for the rest of the run") == len(retired)


@pytest.mark.slow
def test_a_judge_past_its_time_budget_is_stopped_and_each_sample_judged_once(
    models: tuple[Path, Path],  # noqa: F811  (the fixture)
    tmp_path: Path,
) -> None:
    # every judge engine stalls for 1 s at its third step, against a 0.5 s budget per judging:
    # the judgings it holds then are stopped and scored by the fallback; the random judge writes
    # no verdict, so every other judging is retried once (sampled) and then scored the same way
    out = torchrun(
        models,
        tmp_path,
        "--train.steps",
        "3",
        "--reward.timeout-s",
        "0.5",
        env={"PIVOT_FAULTS": "engine_stall:reward:@3"},
    )
    acc = exactly_once(tmp_path, 3, B, G)
    assert acc.violations == [] and acc.misjudged == 0
    last = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    timeouts, retries = last["count/judge_timeouts"], last["count/verdict_retries"]
    assert timeouts > 0 and timeouts + retries >= 3 * B * G, last
    assert "pivot: done" in out.stdout
