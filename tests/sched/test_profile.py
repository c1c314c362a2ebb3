"""Per-role throughput profiles: the file format, which profile a role plans with, and the
profiler writing exactly what the runtime reads."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from configs.presets import get_preset
from pivot.runtime.job.controller_thread import role_profiles
from pivot.sched import ThroughputModel
from pivot.sched.profile import (
    TINY_PROFILE,
    ReplicaShape,
    read_profile,
    resolve_profile,
    write_profile,
)
from tests.engine.conftest import make_model

M1 = ThroughputModel(A=1e-6, B=0.01, C=2e-4, D=0.005)
M2 = ThroughputModel(A=3e-7, B=0.02, C=1e-4, D=0.0)


def test_round_trip_keeps_constants_and_metadata(tmp_path: Path) -> None:
    path = write_profile(tmp_path / "p.json", M1, role="reward", tp=4, samples=[[1, 2, 0.1]])
    assert read_profile(path) == M1
    body = json.loads(path.read_text())
    assert (body["role"], body["tp"], body["A"]) == ("reward", 4, 1e-6)
    assert "prefill_s_per_token" not in body  # not timed: a profile as written before it was
    timed = dataclasses.replace(M1, prefill_s_per_token=3e-5)
    assert read_profile(write_profile(tmp_path / "t.json", timed)) == timed


@pytest.mark.parametrize(
    ("body", "why"),
    [
        ('{"A": 1, "B": 1, "C": 1}', "missing D"),
        ('{"A": -1, "B": 1, "C": 1, "D": 0}', "ThroughputModel.A"),
        ('{"A": "x", "B": 1, "C": 1, "D": 0}', "finite numbers"),
        ("[1, 2]", "missing A, B, C, D"),
        ('{"A": 1, "B": 1, "C": 1, "D": 0, "prefill_s_per_token": "x"}', "prefill_s_per_token"),
        ('{"A": 1, "B": 1, "C": 1, "D": 0, "prefill_s_per_token": -1}', "prefill_s_per_token"),
        ("{", "not JSON"),
    ],
)
def test_bad_file_is_one_line_naming_it(tmp_path: Path, body: str, why: str) -> None:
    (tmp_path / "bad.json").write_text(body)
    with pytest.raises(ValueError, match=f"bad.json: .*{why}"):
        read_profile(tmp_path / "bad.json")
    with pytest.raises(FileNotFoundError, match="nothere.json"):
        read_profile(tmp_path / "nothere.json")


def test_cache_key_follows_model_hardware_and_shape(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text('{"hidden_size": 8}')
    base = ReplicaShape(str(tmp_path / "m"), "NVIDIA H200", 4, "bfloat16", "flash")
    keys = {base.key()}
    for other in (
        ReplicaShape(base.model_folder, "NVIDIA H20", 4, "bfloat16", "flash"),
        ReplicaShape(base.model_folder, "NVIDIA H200", 8, "bfloat16", "flash"),
        ReplicaShape(base.model_folder, "NVIDIA H200", 4, "bfloat16", "flash", "sglang"),
    ):
        keys.add(other.key())
    assert len(keys) == 4 and base.key().startswith("m-")
    before = base.key()
    (tmp_path / "m" / "config.json").write_text(
        '{"hidden_size": 16}'
    )  # another model in the folder
    assert base.key() != before


def test_resolution_order(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    shape = ReplicaShape(str(tmp_path / "m"), "cpu", 1, "float32", "sdpa")
    tiny = read_profile(TINY_PROFILE["reward"])
    got = resolve_profile("reward", "", shape, tmp_path)  # nothing fitted for this model: flagged
    assert got.model == tiny and got.fallback
    write_profile(shape.cache_file(tmp_path), M1)
    got = resolve_profile("reward", "", shape, tmp_path)
    assert got.model == M1 and not got.fallback and got.source == shape.cache_file(tmp_path)
    given = write_profile(tmp_path / "given.json", M2)
    assert resolve_profile("reward", str(given), shape, tmp_path).model == M2  # the flag wins
    assert resolve_profile("rollout", "", None, tmp_path).model == read_profile(
        TINY_PROFILE["rollout"]
    )
    with pytest.raises(ValueError, match="role='train'"):
        resolve_profile("train", "", None, tmp_path)


def test_each_role_plans_with_its_own_file(tmp_path: Path) -> None:
    cfg = get_preset("tiny-cpu")
    cfg.rollout.throughput_profile = str(write_profile(tmp_path / "ro.json", M1))
    cfg.reward.throughput_profile = str(write_profile(tmp_path / "rm.json", M2))
    assert role_profiles(cfg, tmp_path, tmp_path, "cpu") == {"rollout": M1, "reward": M2}
    cfg = get_preset("tiny-cpu")  # the embedded models: each role's fitted tiny file
    assert role_profiles(cfg, tmp_path, tmp_path, "cpu") == {
        role: read_profile(TINY_PROFILE[role]) for role in ("rollout", "reward")
    }


def test_profiler_writes_what_the_runtime_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """tools/profile_engine.py on a tiny folder, default output: the runtime's lookup for that
    model, hardware and TP finds the file, with the constants the tool fitted."""
    import tools.profile_engine as tool

    folder = tmp_path / "genrm"
    make_model(folder)
    monkeypatch.setattr(tool, "PROFILE_CACHE", tmp_path / "cache")
    tool.main(
        [
            "--model",
            str(folder),
            "--role",
            "reward",
            "--seqs",
            "1,2",
            "--ctx",
            "8,16,24",
            # Fastest of 15 timings per point: one timing under CI's load can make the fit
            # refuse (as tests/tools/test_tool_smoke.py's profile_engine run did).
            "--steps",
            "5",
            "--passes",
            "3",
        ]
    )
    shape = ReplicaShape(str(folder), "cpu", 1, "float32", "sdpa")
    got = resolve_profile("reward", "", shape, tmp_path / "cache")
    body = json.loads(shape.cache_file(tmp_path / "cache").read_text())
    assert not got.fallback and got.model == ThroughputModel(
        body["A"], body["B"], body["C"], body["D"], body["prefill_s_per_token"]
    )
    assert body["prefill_s_per_token"] > 0  # timed on the grid's longest prompts
    assert body["role"] == "reward" and body["tp"] == 1 and len(body["samples"]) == 6


def test_profiler_rejects_bad_grids() -> None:
    import tools.profile_engine as tool

    for argv in (
        ["--tiny", "rollout", "--seqs", "1,x"],
        ["--tiny", "rollout", "--seqs", "1", "--ctx", "8"],
        ["--model", "m", "--ctx", "0,8"],
        [],
    ):
        with pytest.raises(SystemExit):
            tool.parse_args(argv)
