"""vLLM's CPU build serving a Qwen3-MoE judge (the hub's Qwen3-30B-A3B layout at tiny sizes) with
its weights loaded as Pivot loads them: after the GPS-style reload its greedy tokens are
transformers' own, which needs Pivot's repack of vLLM's CPU expert weights (without it they are
not), and a model whose max_position_embeddings exceeds the replica's KV capacity starts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.engine.test_vllm import run_driver
from tests.model.fixtures.hub_layouts import write_tiny

pytestmark = pytest.mark.slow


@torch.no_grad()
def transformers_greedy(folder: Path, prompts: list[list[int]], n: int) -> list[list[int]]:
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    out = []
    for prompt in prompts:
        ids = list(prompt)
        for _ in range(n):
            ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
        out.append(ids[len(prompt) :])
    return out


def test_vllm_serves_a_qwen3_moe_judge_loaded_as_pivot_loads_it(
    tmp_path: Path, vllm_python: Path
) -> None:
    folder = write_tiny("Qwen3-30B-A3B", tmp_path / "judge", shards=1, text={"head_dim": 32})
    from tests.engine.vllm_moe_driver import KV_TOKENS, NEW, PROMPTS

    assert json.loads((folder / "config.json").read_text())["max_position_embeddings"] > KV_TOKENS
    got = run_driver(vllm_python, "tests/engine/vllm_moe_driver.py", str(folder))
    want = transformers_greedy(folder, PROMPTS, NEW)
    assert got["repaired"] == want
    # vLLM 0.32's CPU experts read the reloaded plain layout as prepacked: other tokens
    assert got["unrepaired"] != want
    # the model's 40,960 positions are capped to what the cache holds past vLLM's null block
    assert 0 < got["max_len"] <= got["kv_total"] < KV_TOKENS
