"""vLLM's CPU build serving a Qwen3-MoE judge (the hub's Qwen3-30B-A3B layout at tiny sizes) with
its weights loaded as Pivot loads them: after the GPS-style reload its greedy tokens are
transformers' own at TP 2, which needs Pivot's repack of vLLM's CPU expert weights
(without it they are not); a model whose max_position_embeddings exceeds the replica's KV capacity
starts; and a TP 2 replica's cache holds the tokens asked for, not twice as many."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.engine.conftest import run_driver
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
    tp = 2  # TP 1 passes too (the main job on vLLM serves this judge at TP 1); 2 also checks the
    # per-worker KV cache
    # 64: each TP 2 rank's 32 intermediate columns are what vLLM's CPU grouped GEMM takes unpadded
    # (it pads to multiples of 32 at the first load, and its reload then fails on the shapes)
    text = {"head_dim": 32, "moe_intermediate_size": 64}
    folder = write_tiny("Qwen3-30B-A3B", tmp_path / "judge", shards=1, text=text)
    from tests.engine.vllm_moe_driver import KV_TOKENS, NEW, PROMPTS

    assert json.loads((folder / "config.json").read_text())["max_position_embeddings"] > KV_TOKENS
    got = run_driver(vllm_python, "tests/engine/vllm_moe_driver.py", str(folder), str(tp))
    want = transformers_greedy(folder, PROMPTS, NEW)
    assert got["repaired"] == want
    # vLLM 0.32's CPU experts read the reloaded plain layout as prepacked: other tokens
    assert got["unrepaired"] != want
    # the model's 40,960 positions are capped to what the cache holds past vLLM's null block, and
    # vLLM's per-worker cache size holds the replica's tokens at any TP
    assert 0 < got["max_len"] <= got["kv_total"] < KV_TOKENS <= got["kv_total"] + 256
