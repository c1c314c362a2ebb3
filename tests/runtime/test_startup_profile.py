"""A role given a model folder and no profile is profiled at start-up on rank 0's device, and
the profile is cached for the next run; shapes rank 0 cannot hold plan with the fallback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import pivot.runtime.job.controller_thread as controller_thread
from configs.presets import get_preset
from pivot.config import EngineConfig
from pivot.runtime.job.startup_profile import profiled_config, startup_grid
from pivot.sched.profile import TINY_PROFILE, ReplicaShape, read_profile
from tests.engine.conftest import make_model


def test_grid_follows_the_role_and_the_model() -> None:
    assert startup_grid(EngineConfig(max_running_seqs=32), 4096) == (
        [1, 4, 16, 32],
        [64, 256, 1024],
    )
    assert startup_grid(EngineConfig(max_running_seqs=256), 256) == ([1, 4, 16, 64], [64])
    assert startup_grid(EngineConfig(max_running_seqs=1), 40) == ([1], [34])


@pytest.mark.parametrize(
    "served",
    [
        EngineConfig(attention="flex", decode_graphs="eager", block_size=64, max_seq_len=9000),
        EngineConfig(attention="gather", decode_graphs="off", max_prefill_tokens=512),
        EngineConfig(backend="vllm", max_decode_graphs=8),
    ],
)
def test_the_profiled_engine_is_the_served_one_field_for_field(served: EngineConfig) -> None:
    """Only the KV capacity and the running-sequence cap are sized to the grid."""
    profiled = profiled_config(served, [1, 4, 16], [64, 256])
    grid_sized = {"kv_capacity_tokens", "max_running_seqs"}
    for name in served.__dataclass_fields__:
        if name not in grid_sized:
            assert getattr(profiled, name) == getattr(served, name), name
    assert profiled.max_running_seqs == 16 and profiled.kv_capacity_tokens >= 16 * 256


def test_a_profile_is_keyed_by_the_engine_path_that_served_it(tmp_path: Path) -> None:
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text("{}")
    keys = set()
    for engine in (
        EngineConfig(),
        EngineConfig(attention="gather"),
        EngineConfig(decode_graphs="off"),
        EngineConfig(block_size=128),
        EngineConfig(max_prefill_tokens=512),
    ):
        timing = engine.timing_key("sdpa", on_gpu=True)
        keys.add(
            ReplicaShape(str(tmp_path / "m"), "H100", 1, "bfloat16", "sdpa", engine=timing).key()
        )
    assert len(keys) == 5
    # on CPU 'auto' resolves to the gather kernel and no graphs: the same as naming them
    cpu = EngineConfig().timing_key("sdpa", on_gpu=False)
    assert cpu == EngineConfig(attention="gather", decode_graphs="off").timing_key("sdpa", False)


def test_given_genrm_is_profiled_once_then_read_from_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "genrm"
    make_model(folder)
    monkeypatch.setattr(controller_thread, "PROFILE_CACHE", tmp_path / "cache")
    cfg = get_preset("tiny-cpu")
    cfg.model.genrm = str(folder)
    got = controller_thread.role_profiles(cfg, tmp_path / "policy", folder, "cpu")
    engine = cfg.reward.engine.timing_key("sdpa", on_gpu=False)
    cached = ReplicaShape(str(folder), "cpu", 1, "float32", "sdpa", engine=engine).cache_file(
        tmp_path / "cache"
    )
    body = json.loads(cached.read_text())
    assert (
        body["source"] == "start-up profile"
        and body["role"] == "reward"
        and len(body["samples"]) == 4
    )
    assert got == {"rollout": read_profile(TINY_PROFILE["rollout"]), "reward": read_profile(cached)}

    def no_second_profile(*args: object) -> None:
        raise AssertionError("profiled again despite the cache")

    monkeypatch.setattr(controller_thread, "profile_at_startup", no_second_profile)
    assert controller_thread.role_profiles(cfg, tmp_path / "policy", folder, "cpu") == got


def test_shapes_rank_0_cannot_hold_fall_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "genrm"
    make_model(folder)
    monkeypatch.setattr(controller_thread, "PROFILE_CACHE", tmp_path / "cache")
    cfg = get_preset("tiny-cpu")
    cfg.model.genrm, cfg.reward.tp = str(folder), 2
    got = controller_thread.role_profiles(cfg, tmp_path / "policy", folder, "cpu")
    assert got["reward"] == read_profile(TINY_PROFILE["reward"])
    assert "reward: no throughput profile" in caplog.text and not (tmp_path / "cache").exists()


def test_a_gpu_run_never_plans_with_the_tiny_cpu_constants(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "genrm"
    make_model(folder)
    monkeypatch.setattr(controller_thread, "PROFILE_CACHE", tmp_path / "cache")
    monkeypatch.setattr(controller_thread, "hardware_name", lambda device: "NVIDIA H200")
    cfg = get_preset("tiny-cpu")
    cfg.model.genrm, cfg.reward.tp = str(folder), 2  # the embedded engine at TP 2: not measurable
    with pytest.raises(
        ValueError, match=r"reward: no throughput profile .* --reward.throughput-profile"
    ):
        controller_thread.role_profiles(cfg, tmp_path / "policy", folder, "cuda:0")
