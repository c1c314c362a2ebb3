"""The sglang backend on CPU: what is sglang's own in the adapter's mapping (the protocol itself is
held by test_conformance.py) and the role's process model,
against a fake `sglang` module (in sys.modules) that models sglang 0.5.23's weight-update
session, refusals and idle rules as its source does (tests/engine/fake_sglang.py says where each
comes from; tests/engine/test_sglang_contract.py checks the calls against that source). Nothing
here runs sglang itself."""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import sys
from pathlib import Path

import pytest
import torch

import pivot.engine.factory as factory
from pivot.config import ModelConfig
from pivot.engine import ParkedEngine, Request, SamplingParams
from pivot.engine.backends.sglang_adapter import SGLANG_PROCESS_ENV, SglangEngine
from pivot.engine.backends.sglang_weights import LOADER, buckets, load_after_inflight
from pivot.engine.config import EngineConfig
from pivot.gps.torch_specs import specs_from_checkpoint
from pivot.model import ModelArgs, load_state_dict
from pivot.roles.inference import InferenceRole
from tests.engine import fake_sglang as fake_module
from tests.engine.conftest import make_model
from tests.engine.fake_sglang import FakeSglang
from tests.engine.hf_models import save_hf_model


def gps_read(folder: Path, version: int):
    """A GPS Read's stand-in: the checkpoint's tensors, whole."""
    state = load_state_dict(folder)
    return lambda buffers: (dict(state), version)


def test_adapter_starts_sglang_and_streams_its_tokens(
    fake_sglang: type[FakeSglang], tiny_path: Path
) -> None:
    """What the conformance suite (test_conformance.py) leaves to sglang: the server arguments,
    the capacity sglang reports, tokens and log-probs as streamed, an abort sent to sglang's
    tokenizer manager, every weight pushed once by its checkpoint name."""
    eng = SglangEngine.from_pretrained(tiny_path, EngineConfig(kv_capacity_tokens=4096))
    fake = fake_sglang.built[0]
    assert fake.kwargs["load_format"] == "dummy" and fake.kwargs["max_total_tokens"] == 4096
    assert eng.stats().kv_total_tokens == 1000
    eng.add(Request(1, [5, 6, 7], SamplingParams(max_new_tokens=4)))
    eng.add(Request(2, [5] * 10, SamplingParams(max_new_tokens=200)))
    outs = []
    while not outs:
        outs = eng.step()
    assert outs[0].id == 1 and outs[0].output_ids == [3, 4, 5, 6]
    assert outs[0].output_logprobs == [0.0, -1.0, -2.0, -3.0]
    (part,) = eng.abort([2])
    assert part.output_ids == [(10 + i) % 50 for i in range(len(part.output_ids))]  # streamed
    assert fake.ever_aborted == {"2"}
    eng.load_weights(load_state_dict(tiny_path), version=4)
    assert set(fake.updates[-1][0]) <= set(eng.full_shapes)
    assert sum(len(names) for names, _ in fake.updates) == len(eng.full_shapes)


def test_weights_go_in_buckets_and_come_back_by_name(
    fake_sglang: type[FakeSglang], tmp_path: Path
) -> None:
    make_model(
        tmp_path, "llama"
    )  # LlamaForCausalLM: sglang 0.5.23's only served class with get_weights_by_name
    state = load_state_dict(tmp_path)
    eng = SglangEngine.from_pretrained(tmp_path, EngineConfig())
    eng.bucket_bytes = 64 * 1024
    eng.load_weights(state, version=1)
    fake = fake_sglang.built[0]
    assert len(fake.updates) > 1 and [flush for _, flush in fake.updates] == [False] * (
        len(fake.updates) - 1
    ) + [True]
    back = eng.named_parameters_hf()  # what --log.verify-weights sums
    assert back.keys() == state.keys() and all(
        torch.equal(back[k], state[k].float()) for k in state
    )


def test_every_weight_update_runs_in_one_session(
    fake_sglang: type[FakeSglang], tiny_path: Path
) -> None:
    """0.5.23 refuses update_weights_from_tensor outside begin/end_weight_update (weight_updater.py:232-239)."""
    eng = SglangEngine.from_pretrained(tiny_path, EngineConfig())
    eng.bucket_bytes = 64 * 1024
    for version in (1, 2):
        eng.load_weights(load_state_dict(tiny_path), version=version)
    fake = fake_sglang.built[0]
    calls = [call for call, _ in fake.replies]
    n = len(calls) // 2 - 2  # updates per load
    assert calls == (["begin"] + ["update"] * n + ["end"]) * 2 and all(
        ok for _, (ok, _) in fake.replies
    )
    assert not fake.session and eng.weights_version == 2


def test_every_bucket_loads_through_the_loader_that_waits_for_the_inflight_batch(
    fake_sglang: type[FakeSglang], tiny_path: Path
) -> None:
    """The engine registers `LOADER` as a custom weight loader (beside any the caller passes)
    and every bucket names it, idle or with requests paused in place; the path resolves, as
    sglang's `dynamic_import` resolves it in the scheduler, to `load_after_inflight`."""
    eng = SglangEngine.from_pretrained(
        tiny_path, EngineConfig(), custom_weight_loader=["my_pkg.my_loader"]
    )
    fake = fake_sglang.built[0]
    assert fake.kwargs["custom_weight_loader"] == [LOADER, "my_pkg.my_loader"]
    eng.bucket_bytes = 64 * 1024
    eng.load_weights(load_state_dict(tiny_path), version=1)  # idle
    eng.add(Request(1, [5, 6, 7], SamplingParams(max_new_tokens=150)))
    while eng.progress().get(1, 0) < 3:
        eng.step()
    eng.load_weights(load_state_dict(tiny_path), version=2)  # paused in place
    assert len(fake.load_formats) > 2 and set(fake.load_formats) == {LOADER}
    module, _, name = LOADER.rpartition(".")
    assert getattr(importlib.import_module(module), name) is load_after_inflight


def test_the_loader_waits_for_the_device_before_it_copies(monkeypatch: pytest.MonkeyPatch) -> None:
    """In the scheduler, every kernel already launched (the batch an in-place pause left running
    on another stream) finishes before the first weight is overwritten; then sglang's default
    load (`model.load_weights`) runs on what came."""
    events: list[str] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: events.append("sync"))

    class Model:
        def load_weights(self, named: list[tuple[str, torch.Tensor]]) -> None:
            events.append(f"load {[n for n, _ in named]}")

    load_after_inflight(Model(), [("a", torch.zeros(1)), ("b", torch.ones(2))])
    assert events == ["sync", "load ['a', 'b']"]


def test_the_env_sglang_sets_for_its_processes_stays_out_of_pivots(
    fake_sglang: type[FakeSglang], tiny_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sglang.Engine sets NCCL and CUDA variables in the process that builds it (entrypoints/
    engine.py:1884-1921) for the schedulers it starts; once it is built, Pivot's process has its
    own values again, unset ones unset."""
    seen: dict[str, str | None] = {}

    class SetsEnv(FakeSglang):
        def __init__(self, **kwargs: object) -> None:
            os.environ["NCCL_CUMEM_ENABLE"] = "0"
            os.environ["NCCL_NVLS_ENABLE"] = "0"
            os.environ["CUDA_DEVICE_MAX_CONNECTIONS"] = "8"
            seen.update({k: os.environ.get(k) for k in SGLANG_PROCESS_ENV})  # its processes'
            super().__init__(**kwargs)

    monkeypatch.setattr(sys.modules["sglang"], "Engine", SetsEnv)
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    for k in ("NCCL_CUMEM_ENABLE", "CUDA_DEVICE_MAX_CONNECTIONS"):
        monkeypatch.delenv(k, raising=False)
    SglangEngine.from_pretrained(tiny_path, EngineConfig())
    assert seen["NCCL_NVLS_ENABLE"] == "0" and seen["CUDA_DEVICE_MAX_CONNECTIONS"] == "8"
    assert os.environ["NCCL_NVLS_ENABLE"] == "1"
    assert "NCCL_CUMEM_ENABLE" not in os.environ and "CUDA_DEVICE_MAX_CONNECTIONS" not in os.environ


def test_a_refusal_is_an_error_and_closes_the_session(
    fake_sglang: type[FakeSglang], tiny_path: Path
) -> None:
    eng = SglangEngine.from_pretrained(tiny_path, EngineConfig())
    fake = fake_sglang.built[0]
    fake.session = True  # a session left open (sglang refuses a second begin)
    with pytest.raises(
        ValueError,
        match="begin_weight_update: sglang refused: a weight-update session is already open",
    ):
        eng.load_weights(load_state_dict(tiny_path), version=1)
    fake.session = False
    fake.update_weights_from_tensor = lambda named, load_format=None, flush_cache=True: (
        False,
        "boom",
    )
    with pytest.raises(ValueError, match="update_weights_from_tensor: sglang refused: boom"):
        eng.load_weights(load_state_dict(tiny_path), version=2)
    assert (
        not fake.session and eng.weights_version == 0
    )  # end_weight_update ran; the version did not move
    fake.update_weights_from_tensor = lambda named, load_format=None, flush_cache=True: (
        None
    )  # not (success, message)
    with pytest.raises(ValueError, match="unexpected reply"):
        eng.load_weights(load_state_dict(tiny_path), version=3)


def test_release_waits_until_the_scheduler_is_idle(
    fake_sglang: type[FakeSglang], tiny_path: Path
) -> None:
    """release_memory_occupation asserts an idle scheduler, its in-flight batch included."""
    eng = SglangEngine.from_pretrained(tiny_path, EngineConfig())
    eng.add(Request(1, [5, 6, 7], SamplingParams(max_new_tokens=200)))
    while not eng.progress().get(1):
        eng.step()
    partials = eng.release()
    assert fake_sglang.built[0].calls == ["release"] and len(partials[0].output_ids) >= 1


def test_weight_update_with_requests_running_pauses_them_in_place(
    fake_sglang: type[FakeSglang], tiny_path: Path
) -> None:
    """A running request is neither aborted nor re-prefilled: generation pauses in place, the
    update runs inside one session without flushing (a flush with requests running fails the
    update in 0.5.23), the request continues on its own stream with the new weights' tokens, and
    the prefix cache is flushed once the engine is idle."""
    eng = SglangEngine.from_pretrained(tiny_path, EngineConfig())
    fake = fake_sglang.built[0]
    eng.add(Request(1, [5, 6, 7], SamplingParams(max_new_tokens=150)))
    while eng.progress().get(1, 0) < 3:
        eng.step()
    eng.load_weights(load_state_dict(tiny_path), version=5)
    assert all(ok for _, (ok, _) in fake.replies) and eng.has_work() and not fake.paused
    assert [flush for _, flush in fake.updates] == [False] * len(fake.updates)
    outs = []
    while not outs:
        outs = eng.step()
    out = outs[0]
    k = out.versions.starts[1][1]  # where the stream stood when the update ended
    assert out.versions.starts == ((0, 0), (5, k)) and 3 <= k < 150 and out.weights_version == 0
    assert len(out.output_ids) == 150 and fake.ever_aborted == set()
    assert list(fake.salts) == ["1"] and fake.salts["1"] == "v0"  # one stream: never re-added
    old = [(3 + i) % 50 for i in range(150)]
    new = [(3 + i + fake_module.EPOCH_SHIFT) % 50 for i in range(150)]
    assert out.output_ids[:k] == old[:k] and out.output_ids[k + 1 :] == new[k + 1 :]
    assert fake.flushes == 1  # the stale prefixes went once idle
    eng.add(Request(2, [5, 6, 7], SamplingParams(max_new_tokens=2)))
    while eng.has_work():
        eng.step()
    assert fake.salts["2"] == "v5"  # a new request never matches a prefix of the old weights


def test_a_stream_that_ends_during_the_update_comes_back_once(
    fake_sglang: type[FakeSglang], tiny_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sglang has finished request 1 (and forgotten its rid) but its last chunk has not reached the
    stream when a weight update pauses generation: the request is returned once, finished, with
    its tokens, and never re-added past its end."""
    monkeypatch.setattr(FakeSglang, "delivery_s", 0.05)
    eng = SglangEngine.from_pretrained(tiny_path, EngineConfig())
    fake = fake_sglang.built[0]
    eng.add(Request(1, [5, 6, 7], SamplingParams(max_new_tokens=3)))
    eng.loop.run_until_complete(asyncio.sleep(0))  # the stream starts
    while "1" in fake.live_rids:  # until the scheduler has finished it
        eng.loop.run_until_complete(asyncio.sleep(0.0005))
    assert eng.has_work() and eng.progress()[1] < 3  # the last chunk is still on its way
    eng.load_weights(load_state_dict(tiny_path), version=2)
    assert fake.ever_aborted == set() and all(ok for _, (ok, _) in fake.replies)
    outs = []
    while eng.has_work():
        outs += eng.step()
    assert [(o.id, o.output_ids, o.finish_reason) for o in outs] == [(1, [3, 4, 5], "length")]
    assert list(fake.salts) == ["1"] and eng.step() == []


def test_verify_weights_refused_where_sglang_cannot_return_whole_tensors(
    fake_sglang: type[FakeSglang], tiny_path: Path, tmp_path: Path
) -> None:
    qwen2 = SglangEngine.from_pretrained(
        tiny_path, EngineConfig()
    )  # Qwen2ForCausalLM: no get_weights_by_name
    with pytest.raises(ValueError, match="cannot return whole weights of Qwen2ForCausalLM at TP 1"):
        qwen2.named_parameters_hf()
    make_model(tmp_path, "llama")
    llama = SglangEngine.from_pretrained(
        tmp_path, EngineConfig(), tp_size=2
    )  # TP 2: q/k/v, gate/up come back sharded
    with pytest.raises(ValueError, match="at TP 2"):
        llama.named_parameters_hf()
    llama1 = SglangEngine.from_pretrained(tmp_path, EngineConfig())
    llama1.load_weights(load_state_dict(tmp_path), version=1)
    fake_sglang.has_weights_by_name = False  # sglang answers None and logs why
    with pytest.raises(ValueError, match="returned no weights"):
        llama1.named_parameters_hf()


def test_buckets_keep_order_and_limit() -> None:
    pairs = [
        (str(i), torch.zeros(n)) for i, n in enumerate([3, 3, 10, 1, 1, 1])
    ]  # float32: 4 B each
    got = [[name for name, _ in b] for b in buckets(pairs, 24)]
    assert got == [["0", "1"], ["2"], ["3", "4", "5"]]  # 12 + 12 bytes fill 24; 40 bytes go alone


def test_build_engine_passes_the_device_index(
    fake_sglang: type[FakeSglang], tiny_path: Path
) -> None:
    factory.build_engine(
        tiny_path, EngineConfig(backend="sglang"), device="cuda:5", dtype="bfloat16"
    )
    assert (
        fake_sglang.built[0].kwargs["base_gpu_id"] == 5
        and fake_sglang.built[0].kwargs["tp_size"] == 1
    )


def test_role_leader_serves_sglang_from_its_slots_first_device(
    fake_sglang: type[FakeSglang], tiny_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        factory, "group_position", lambda group: (0, 4)
    )  # leader of a 4-device slot
    role = InferenceRole(
        role="rollout",
        model_path=tiny_path,
        engine_cfg=EngineConfig(backend="sglang"),
        model_cfg=ModelConfig(dtype="bfloat16"),
        device="cuda",
        seed=0,
        local_device=4,
    )
    version, phases = role.shift_up(1, object(), gps_read(tiny_path, 7))
    fake = fake_sglang.built[0]
    assert (fake.kwargs["tp_size"], fake.kwargs["base_gpu_id"], fake.kwargs["dtype"]) == (
        4,
        4,
        "bfloat16",
    )
    assert version == 7 and isinstance(role.engine, SglangEngine) and "gps_read" in phases
    assert sum(len(names) for names, _ in fake.updates) == len(load_state_dict(tiny_path))
    role.add([Request(11, [3, 4, 5], SamplingParams(max_new_tokens=500))])
    while not role.stats()[1].get(11):
        role.step()
    partials, _ = role.shift_down()  # abort (partials keep their tokens) + release
    assert [p.id for p in partials] == [11] and len(partials[0].output_ids) >= 1
    assert fake.calls == ["release"] and not role.has_work()
    version, _ = role.shift_up(
        1, object(), gps_read(tiny_path, 8)
    )  # resume + the Read again, no new engine
    assert fake.calls == ["release", "resume"] and len(fake_sglang.built) == 1 and version == 8
    role.add(partials)  # migration: the partial resumes where it stopped
    assert role.abort([11])[0].output_ids[: len(partials[0].output_ids)] == partials[0].output_ids
    with pytest.raises(
        ValueError, match="at TP 4"
    ):  # --log.verify-weights is refused with sglang at config time
        role.checksum()


def test_role_follower_is_parked(
    fake_sglang: type[FakeSglang], tiny_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(factory, "group_position", lambda group: (2, 4))
    role = InferenceRole(
        role="reward",
        model_path=tiny_path,
        engine_cfg=EngineConfig(backend="sglang"),
        model_cfg=ModelConfig(),
        device="cuda",
        seed=0,
        local_device=6,
    )
    version, _ = role.shift_up(
        0, object(), lambda buffers: ({}, 3)
    )  # a parked rank's Read holds nothing
    assert version == 3 and isinstance(role.engine, ParkedEngine) and fake_sglang.built == []
    assert role.step() == [] and not role.has_work() and role.checksum() == 0.0
    partials, _ = role.shift_down()
    assert list(partials) == [] and role.slot is None


def test_sglang_genrm_needs_no_pivot_model_class(
    fake_sglang: type[FakeSglang], tmp_path: Path
) -> None:
    """A MoE GenRM with a config Pivot's own model classes refuse (yarn RoPE) is served by sglang:
    the role and the adapter read the checkpoint's tensor list, not ModelArgs."""
    save_hf_model(tmp_path, "qwen3_moe", 0)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["rope_parameters"] = {"rope_type": "yarn", "factor": 4.0, "rope_theta": 10000.0}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="rope_type"):
        ModelArgs.load(tmp_path)
    role = InferenceRole(
        role="reward",
        model_path=tmp_path,
        engine_cfg=EngineConfig(backend="sglang"),
        model_cfg=ModelConfig(),
        device="cpu",
        seed=0,
    )
    version, _ = role.shift_up(0, None, gps_read(tmp_path, 2))
    names = {n for names, _ in fake_sglang.built[0].updates for n in names}
    assert version == 2 and names == {s.name for s in specs_from_checkpoint(tmp_path)}
    assert any(".mlp.experts." in n for n in names)
    assert len(fake_sglang.built[0].replies) >= 3 and all(
        ok for _, (ok, _) in fake_sglang.built[0].replies
    )
