"""The main job on 4 CPU ranks (torchrun) with random-weight tiny models: every deployment mode
end to end, exactly-once accounting under many shifts, weights after shift up equal the GPS
version they report, and resume after a SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from safetensors.torch import load_file

from pivot.runtime.records.audit import exactly_once, shift_up_weights
from pivot.runtime.records.manifest import problem
from tests.conftest import torchrun_main
from tests.runtime.models import random_models

pytestmark = pytest.mark.slow

B, G = 4, 2
SMALL = [
    "--train.batch-prompts",
    str(B),
    "--train.group-size",
    str(G),
    "--rollout.max-new-tokens",
    "12",
    "--reward.max-new-tokens",
    "8",
    "--data.max-digits",
    "2",
    "--log.no-progress",
    "--log.no-tensorboard",
    "--eval.prompts",
    "6",
    "--train.filter-groups",
    "0",
]  # random models: every group is uniform


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return random_models(tmp_path_factory.mktemp("models"))


def torchrun(
    models: tuple[Path, Path],
    run_dir: Path,
    *flags: str,
    wait: bool = True,
    restarts: int = 0,
    env: dict[str, str] | None = None,
) -> subprocess.Popen | subprocess.CompletedProcess:
    cmd = torchrun_main(
        4,
        "--model.policy",
        str(models[0]),
        "--model.genrm",
        str(models[1]),
        "--log.dir",
        str(run_dir),
        *SMALL,
        *flags,
        launcher=("--max-restarts", str(restarts)),
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", **(env or {})}
    if not wait:
        return subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            start_new_session=True,
        )
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=240, env=env)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    return out


def rows(run_dir: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (run_dir / name).read_text().splitlines() if line.strip()]


def check_exactly_once(run_dir: Path, steps: int) -> None:
    assert exactly_once(run_dir, steps, B, G).violations == []


def test_many_shifts_exactly_once_and_weights_match_gps(
    models: tuple[Path, Path], tmp_path: Path
) -> None:
    # the chaos planner shifts on every tick (pivot/plan/chaos.py), so the number of shifts grows
    # with the run's wall time: a loaded machine shifts more, not less (the five-step planner's
    # choices depend on the timing of what it sees); checkpoints every step export each policy
    # version, so shift-up checksums can be compared with what GPS held; dynamic sampling
    # replaces groups while their sequences are being shifted around
    torchrun(
        models,
        tmp_path,
        "--train.steps",
        "4",
        "--planner.strategy",
        "chaos",
        "--planner.interval-s",
        "0.05",
        "--checkpoint.every",
        "1",
        "--log.verify-weights",
        "--train.filter-groups",
        "2",
    )
    check_exactly_once(tmp_path, 4)
    dropped = rows(tmp_path, "metrics.jsonl")[-1]["count/groups_dropped"]
    assert 0 < dropped <= 2 * 4
    assert len({(r["step"], r["prompt"]) for r in rows(tmp_path, "samples.jsonl")}) == 4 * B
    events = [r for r in rows(tmp_path, "timeline.jsonl") if r.get("kind") == "shift"]
    ups = [e for e in events if e.get("event") == "shift_up" and e["role"] != "train"]
    assert sum(e.get("event") in ("shift_up", "shift_down") for e in events) >= 8
    weights = shift_up_weights(events, tmp_path / "checkpoints", *models)
    assert (weights.verified, weights.unverifiable, weights.mismatched) == (len(ups), 0, [])


MODES = {
    "colocated": ["--cluster.mode", "colocated"],
    "disaggregated": ["--cluster.mode", "disaggregated"],
    "rr_colocated": ["--cluster.mode", "rr_colocated"],
    "static": ["--planner.strategy", "static"],
    "rule_based": ["--planner.strategy", "rule_based"],
    # replicas over two ranks: the leader schedules, the follower mirrors each step (lockstep)
    "pivot_tp2": ["--rollout.tp", "2", "--reward.tp", "2"],
    # bf16 end to end: engines and GPS buffers in the model dtype, fp32 master weights in the
    # trainer; with the KL loss against the initial policy (its reference sharded beside the
    # trainer's policy, in bf16 too): two independent options, one 4-rank job
    "pivot_bf16_kl": ["--model.dtype", "bfloat16", "--train.kl-coef", "0.01"],
}


@pytest.mark.parametrize("mode", list(MODES))
def test_every_mode_runs(models: tuple[Path, Path], tmp_path: Path, mode: str) -> None:
    flags = MODES[mode]
    torchrun(models, tmp_path, "--train.steps", "2", *flags)
    check_exactly_once(tmp_path, 2)
    scale = 0.5 if mode == "pivot_bf16_kl" else 1.0  # fp32 files, GPS in the model dtype
    model_bytes = {
        role: scale
        * sum(
            t.numel() * t.element_size()
            for t in load_file(str(folder / "model.safetensors")).values()
        )
        for role, folder in (("rollout", models[0]), ("reward", models[1]))
    }
    for e in rows(
        tmp_path, "timeline.jsonl"
    ):  # a shift up Reads each rank's share, a TP=2 rank less than all
        if e.get("event") == "shift_up" and e["role"] != "train":
            tp = 2 if mode == "pivot_tp2" else 1
            assert (
                len(e["gps_read_bytes"]) == tp
                and sum(e["gps_read_bytes"]) >= model_bytes[e["role"]]
            ), e
            assert tp == 1 or max(e["gps_read_bytes"]) < model_bytes[e["role"]], e
    evals = rows(
        tmp_path, "eval.jsonl"
    )  # the held-out evaluation before the first step and after the last
    assert [(r["step"], r["prompts"]) for r in evals] == [(0, 6), (2, 6)]
    # each evaluation ran on the one policy version it names: training waits for it
    assert [r["versions"] for r in evals] == [[0, 0], [2, 2]]


def test_automatic_restart_after_kill_then_resume_past_a_damaged_checkpoint(
    models: tuple[Path, Path], tmp_path: Path
) -> None:
    """A rank SIGKILLed after the step-2 checkpoint: torchrun restarts the job, which continues
    from the newest complete checkpoint on its own (`auto`). Then the final checkpoint gets a
    flipped byte and a longer run resumed by hand reports it in one line and starts from step 6."""
    run = ["--checkpoint.every", "2", "--checkpoint.resume", "auto"]
    proc = torchrun(models, tmp_path, "--train.steps", "8", *run, wait=False, restarts=1)
    manifest = tmp_path / "checkpoints" / "step_000002" / "manifest.json"
    deadline = time.monotonic() + 180
    while not manifest.is_file() and time.monotonic() < deadline:
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        time.sleep(0.2)
    victim = [
        int(p)
        for p in subprocess.run(
            ["pgrep", "-f", f"log.dir {tmp_path}"], capture_output=True, text=True
        ).stdout.split()
    ]
    workers = [
        p
        for p in victim
        if p != proc.pid and Path(f"/proc/{p}/cmdline").read_bytes().count(b"main.py")
    ]
    os.kill(
        max(workers), signal.SIGKILL
    )  # one rank dies; torchrun stops the rest and restarts them
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out[-3000:]
    assert [r["event"] for r in rows(tmp_path, "timeline.jsonl") if r.get("event") == "resume"] == [
        "resume"
    ], out[-3000:]
    check_exactly_once(tmp_path, 8)
    steps = [r["step"] for r in rows(tmp_path, "eval.jsonl")]
    assert steps == sorted(set(steps)) and steps[0] == 0 and steps[-1] == 8, steps
    shard = tmp_path / "checkpoints" / "step_000008" / "rank00000-of-00001.safetensors"
    shard.write_bytes(shard.read_bytes()[:-1] + bytes([shard.read_bytes()[-1] ^ 1]))
    out = torchrun(
        models, tmp_path, "--train.steps", "10", "--checkpoint.every", "2", "--checkpoint.resume"
    )
    skipped = [line for line in out.stdout.splitlines() if "skipped" in line]
    assert skipped == [
        f"pivot: checkpoint {shard.parent} skipped: {shard.name}: sha256 differs from manifest.json (corrupt)"
    ]
    check_exactly_once(tmp_path, 10)
    assert problem(shard.parent) is None  # step 8 was written again, complete


# the paper's GenRM families: qwen3_moe served over TP=2 (sliced experts), glm4 on one rank,
# the qwen3_5_moe hybrid over TP=2 (linear-attention heads split like attention heads)
GENRM_FAMILIES = {
    "qwen3_moe": ["--reward.tp", "2"],
    "glm4": [],
    "qwen3_5_moe": ["--reward.tp", "2"],
}


@pytest.mark.parametrize("family", list(GENRM_FAMILIES))
def test_genrm_families_run(tmp_path: Path, family: str) -> None:
    models = random_models(tmp_path / "models", genrm_family=family)
    torchrun(models, tmp_path / "run", "--train.steps", "2", *GENRM_FAMILIES[family])
    check_exactly_once(tmp_path / "run", 2)
