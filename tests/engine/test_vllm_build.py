"""How a vLLM replica's engine is set up from a torchrun rank (no vLLM needed): which devices it
sees, the KV bytes its capacity is sized with, and the EOS ids that stop it."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from pivot.engine.backends.vllm_build import cuda_devices, eos_ids, kv_bytes_per_token


def test_devices_follow_the_jobs_own_numbering(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert cuda_devices(2, 2) == "2,3"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6,7")  # as Slurm hands a job its GPUs
    assert cuda_devices(1, 2) == "5,6" and cuda_devices(0, 1) == "4"
    with pytest.raises(ValueError, match="CUDA_VISIBLE_DEVICES lists 4"):
        cuda_devices(3, 2)


def test_kv_bytes_and_eos_from_the_folder(tmp_path: Path) -> None:
    config = {"num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
              "hidden_size": 3584, "eos_token_id": 151643}  # Qwen2.5-7B  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [151645, 151643]}))
    assert kv_bytes_per_token(tmp_path, torch.bfloat16) == 2 * 28 * 4 * 128 * 2  # 57,344 B
    # per worker: 2 of the 4 KV heads at TP 2, and one (replicated) at TP 8
    assert kv_bytes_per_token(tmp_path, torch.bfloat16, 2) == 2 * 28 * 2 * 128 * 2
    assert kv_bytes_per_token(tmp_path, torch.bfloat16, 8) == 2 * 28 * 1 * 128 * 2
    assert eos_ids(tmp_path) == {151643, 151645}


def test_weight_files_of_ended_processes_are_removed(tmp_path: Path) -> None:
    """A SIGKILLed job leaves its shm weight file (a whole model's bytes in host memory); the next
    engine built on the host removes it, and no live process's file."""
    import subprocess
    import sys

    from pivot.engine.backends.vllm_weights import shm_file

    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                           capture_output=True, text=True, check=True)  # fmt: skip
    orphan = tmp_path / f"pivot-vllm-{ended.stdout.strip()}-1.safetensors"
    live = tmp_path / f"pivot-vllm-{os.getppid()}-2.safetensors"
    other = tmp_path / "pivot-vllm-notapid-3.safetensors"
    for f in (orphan, live, other):
        f.write_bytes(b"x")
    mine = shm_file(tmp_path, "ab")
    assert mine.name == f"pivot-vllm-{os.getpid()}-ab.safetensors" and not mine.exists()
    assert not orphan.exists() and live.exists() and other.exists()


@pytest.mark.parametrize("name, shards", [("Qwen3.5-122B-A10B", 3), ("Qwen3-30B-A3B", 1)])
def test_the_weight_file_carries_the_checkpoints_own_names(
    tmp_path: Path, name: str, shards: int
) -> None:
    """vLLM maps a checkpoint's names (Qwen3.5's `model.language_model.*` to its language model,
    models/qwen3_vl.py:1969-1974); Pivot's names drop that prefix, so the weight file vLLM reloads
    from must carry the checkpoint's. The oracle is the folder's own safetensors headers."""
    from safetensors import safe_open

    from pivot.engine.backends.vllm_weights import ShmSafetensors
    from pivot.model.hf_folder import checkpoint_names, tensor_headers
    from tests.model.fixtures.hub_layouts import write_tiny

    folder = write_tiny(name, tmp_path / "model", shards=shards)
    on_disk: list[str] = []
    for file in sorted(folder.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            on_disk += [n for n in f.keys() if not n.startswith(("model.visual.", "mtp."))]
    names = checkpoint_names(folder)
    headers = tensor_headers(folder)
    assert sorted(names.values()) == sorted(on_disk) and set(names) == set(headers)
    assert (name == "Qwen3-30B-A3B") == all(k == v for k, v in names.items())
    shm = ShmSafetensors(tmp_path / "w.safetensors", headers, names)
    ours = next(k for k in names if ".layers.0." in k)
    shm.tensors[ours].fill_(1.5)
    with safe_open(str(shm.path), framework="pt") as f:
        assert sorted(f.keys()) == sorted(on_disk)
        assert bool((f.get_tensor(names[ours]) == 1.5).all())
    shm.close()


def test_workers_read_their_slices_of_the_weight_file_in_place(tmp_path: Path) -> None:
    """What a vLLM worker hands its loaders (`map_safetensors`): views of one mapping of the file,
    equal to what the Read wrote, of which a TP rank's loader (narrow, then copy to its device:
    vllm/model_executor/layers/linear.py:576-593) reads only its slice, counted at the dispatcher;
    the old way (`safe_open(...).get_tensor`) made a whole copy of every tensor in every worker.
    A write through a view never reaches the file."""
    from safetensors import safe_open

    from pivot.engine.backends.vllm_weights import ShmSafetensors, map_safetensors
    from pivot.engine.traffic import TrafficCounter

    specs = {"a.weight": ((64, 32), torch.bfloat16), "b.bias": ((64,), torch.float32)}
    shm = ShmSafetensors(tmp_path / "w.safetensors", specs)
    g = torch.Generator().manual_seed(0)
    for t in shm.tensors.values():
        t.copy_(torch.randn(t.shape, generator=g).to(t.dtype))
    mapping, views = map_safetensors(shm.path)
    with safe_open(str(shm.path), framework="pt") as f:
        for name, view in views.items():
            assert torch.equal(view, f.get_tensor(name)) and view.dtype == specs[name][1]
    storages = {v.untyped_storage().data_ptr() for v in views.values()}
    assert len(storages) == 1  # one mapping, no copies
    tp, rank = 4, 1
    device_slice = torch.empty(16, 32, dtype=torch.bfloat16)
    with TrafficCounter() as c:
        device_slice.copy_(views["a.weight"].narrow(0, rank * 16, 16))
    assert c.traffic.read == 16 * 32 * 2 == views["a.weight"].numel() * 2 // tp
    assert c.traffic.created == 0
    views["b.bias"].fill_(7.0)  # private: the file keeps what the Read wrote
    assert not bool((shm.tensors["b.bias"] == 7.0).any())
    del views
    mapping.close()
    shm.close()


def test_engine_fields_of_a_replica(tmp_path: Path) -> None:
    """What Pivot asks vLLM for: graphs on CUDA unless the flag says off, the auto-fit context
    length, a per-worker KV cache, and no vision tower for a vision-language judge."""
    from pivot.engine.backends.vllm_build import engine_kwargs
    from pivot.engine.config import EngineConfig
    from tests.model.fixtures.hub_layouts import write_tiny

    vl = write_tiny("Qwen3.5-122B-A10B", tmp_path / "vl", shards=1)
    moe = write_tiny("Qwen3-30B-A3B", tmp_path / "moe", shards=1)
    auto, off = EngineConfig(kv_capacity_tokens=1000), EngineConfig(decode_graphs="off")
    common = dict(tp_size=2, dtype="bfloat16", seed=0)
    got = engine_kwargs(vl, auto, on_cuda=True, **common)
    assert got["language_model_only"] and not got["enforce_eager"] and got["max_model_len"] == -1
    assert got["kv_cache_memory_bytes"] == 1000 * kv_bytes_per_token(vl, torch.bfloat16, 2)
    assert not engine_kwargs(moe, auto, on_cuda=True, **common)["language_model_only"]
    assert engine_kwargs(moe, off, on_cuda=True, **common)["enforce_eager"]
    assert engine_kwargs(moe, auto, on_cuda=False, **common)["enforce_eager"]  # CPU: no graphs


def test_the_free_share_is_the_least_over_the_replicas_devices(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each vLLM worker checks free memory on its own device (v1/worker/utils.py:761-769), so a
    TP replica asks for the share the fullest of its devices has free. The leader's device is
    read through CUDA, the others through NVML (no CUDA context opened on them), each by the
    name CUDA_VISIBLE_DEVICES gives it; NVML is shut down after."""
    import sys
    from types import ModuleType, SimpleNamespace

    from pivot.engine.backends.vllm_build import free_share

    gib = 1 << 30
    cuda_asked: list[int] = []
    nvml: dict[object, tuple[int, int]] = {5: (60 * gib, 80 * gib), "GPU-b": (20 * gib, 80 * gib)}
    calls: list[str] = []
    fake = ModuleType("vllm.third_party.pynvml")
    fake.nvmlInit = lambda: calls.append("init")  # type: ignore[attr-defined]
    fake.nvmlShutdown = lambda: calls.append("shutdown")  # type: ignore[attr-defined]
    fake.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    fake.nvmlDeviceGetHandleByUUID = lambda u: u  # type: ignore[attr-defined]
    fake.nvmlDeviceGetMemoryInfo = lambda h: SimpleNamespace(  # type: ignore[attr-defined]
        free=nvml[h][0], total=nvml[h][1]
    )
    third_party = ModuleType("vllm.third_party")
    third_party.pynvml = fake  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "vllm", ModuleType("vllm"))
    monkeypatch.setitem(sys.modules, "vllm.third_party", third_party)
    monkeypatch.setitem(sys.modules, "vllm.third_party.pynvml", fake)
    monkeypatch.setattr(
        torch.cuda, "mem_get_info", lambda d: (cuda_asked.append(d), (40 * gib, 80 * gib))[1]
    )
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,GPU-b")
    assert free_share(0) == pytest.approx(0.5 - 0.02) and calls == []  # TP 1: CUDA alone
    assert free_share(0, 2) == pytest.approx(0.5 - 0.02)  # device 5 has 75% free
    assert free_share(0, 3) == pytest.approx(0.25 - 0.02)  # GPU-b has 25% free
    assert cuda_asked == [0, 0, 0] and calls == ["init", "shutdown"] * 2
