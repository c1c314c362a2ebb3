"""How a vLLM replica's engine is set up from a torchrun rank (no vLLM needed): which devices it
sees, the KV bytes its capacity is sized with, and the EOS ids that stop it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from pivot.engine.vllm_build import cuda_devices, eos_ids, kv_bytes_per_token


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
    assert eos_ids(tmp_path) == {151643, 151645}
