"""The main job on emulated devices (CPU ranks, paper-scale device time) with its training slot
sized by measurement (`--train.devices auto`, pivot/runtime/control/sizing.py): re-sized at step
boundaries with no sample lost or trained twice, the trainer's state carried through the
boundary's checkpoint, response lengths drawn from the simulator's workload and every rank's
device time in the run summary; and the start-up sizing picking what the offline search picks
on the same costs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pivot.cli import parse
from pivot.dist import ClusterSpec
from pivot.emulate.backend import EmulatedDevices
from pivot.sim.autosize import label, size_slot
from pivot.sim.deploy import Allocation, deployment
from pivot.sim.options import Calibration
from pivot.sim.workload import Workload, step_samples
from tests.emulate.jobs import L, job_args, torchrun
from tests.runtime.models import random_models
from tests.runtime.test_runtime import B, G, check_exactly_once, rows

pytestmark = pytest.mark.slow


def events(run: Path, name: str) -> list[dict]:
    return [r for r in rows(run, "timeline.jsonl") if r.get("event") == name]


def test_resized_at_step_boundaries_exactly_once(tmp_path: Path) -> None:
    # every sizing decides (no least gain) and one is due after every step: the slot moves at
    # start-up (no state yet) or through a step's checkpoint, perhaps more than once. Enough
    # steps that the start-up search (spawned, ~2 s here, several times that beside CI's other
    # worker) lands mid-run; the run's end awaits the one in flight, so the second is logged
    policy, genrm = random_models(tmp_path / "models")
    run, steps = tmp_path / "run", 6
    extra = ["--emulate.time-scale", "0.002", "--train.steps", str(steps), "--train.devices", "4"]
    extra += ["--train.resize-every", "1", "--train.resize-gain", "0", "--checkpoint.every", "0"]
    out = torchrun(8, job_args(policy, genrm, run, *extra))
    check_exactly_once(run, steps)
    sizings, resized = events(run, "train_sizing"), events(run, "train_resized")
    assert sizings and sizings[0]["devices"] == 4 and "T4" in sizings[0]["predicted"]
    for s in sizings:  # with no least gain, a pick is the best predicted, never the current
        # by value: the log rounds to whole tokens/s, and two slots a fraction apart tie there
        # (CI: T7 picked over T6, both logged at the same figure)
        best = max(s["predicted"].values())
        assert s["pick"] is None or s["predicted"][s["pick"]] == best, s
        assert s["pick"] != label(Allocation(s["devices"], s["reserve"])), s
    assert sizings[0]["calibration"]["train"] == 1.0  # at start-up nothing has trained
    later = sizings[1]["calibration"]  # after step 1 or later: a step, and the shifts it made
    assert later["train"] != 1.0 and later["rollout"]["shift"] != 1.0
    assert resized, out.stdout[-2000:]  # T2 beats T4 at start-up on these costs
    sizes = [4] + [r["devices"] for r in resized]
    assert [r["was"] for r in resized] == sizes[:-1]
    for r in resized:  # a trainer that has trained moves through the boundary's checkpoint
        if r["step"] > 0:
            assert (Path(r["checkpoint"]) / "manifest.json").is_file()
    metrics = rows(run, "metrics.jsonl")
    assert [m["policy_version"] for m in metrics] == list(range(1, steps + 1))
    assert metrics[-1]["count/train_resizes"] == len(resized)

    def slot_of(
        k: int,
    ) -> int:  # step k (from 0) trains on the slot the last re-size before it left
        return ([4] + [r["devices"] for r in resized if r["step"] <= k])[-1]

    tallies = sorted((run / "emulated").iterdir())
    assert [p.name for p in tallies] == [f"rank_{i}.json" for i in range(8)]
    trained = sum(json.loads(p.read_text()).get("train", {}).get("count", 0) for p in tallies)
    assert trained == sum(slot_of(k) for k in range(steps))  # once per step on each of its ranks
    assert "training slot re-sized" in out.stdout and "emulated device time" in out.stdout
    workload = Workload(prompts_per_step=B, group_size=G)
    for r in rows(run, "samples.jsonl"):  # EOS ignored until the length drawn for that very sample
        drawn = step_samples(workload, 0, r["step"] - 1, 8)[
            r["prompt"] * G + r["sample"]
        ].response_len
        assert r["response_tokens"] == max(1, round(drawn / L)), r


def test_startup_sizing_picks_the_offline_search_slot(tmp_path: Path) -> None:
    # 8 emulated devices: the start-up sizing runs on the engines' profiles, which on emulated
    # devices are the cost model's own, so it must score every slot as the offline search does
    policy, genrm = random_models(tmp_path / "models")
    run = tmp_path / "run"
    args = job_args(policy, genrm, run, "--emulate.time-scale", "0.005", "--train.steps", "3")
    args += ["--train.devices", "auto", "--checkpoint.every", "0"]
    torchrun(8, args)
    check_exactly_once(run, 3)
    first = events(run, "train_sizing")[0]
    cfg = parse(args, 8, 8)
    backend = EmulatedDevices()
    model = backend.cost_model(backend.runtime_config(cfg), ClusterSpec(8, 0, 8))
    start = cfg.train.pool
    offline = size_slot(
        deployment(model.paper, "pivot", Allocation(start)),
        model.options(Calibration()),
        float("inf"),
    )
    assert first["devices"] == start == 2  # a quarter of the world
    predicted = {label(p.alloc): round(p.throughput) for p in offline.points}
    assert first["predicted"] == predicted
    best = offline.best
    tie = [t for t, v in predicted.items() if v >= 0.95 * best.throughput]  # resize_gain's
    picked = first["pick"] if first["pick"] is not None else f"T{first['devices']}"
    assert picked in tie
