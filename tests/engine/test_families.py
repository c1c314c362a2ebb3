"""The engine serves the hub layouts of Qwen3-MoE and GLM-4: greedy tokens equal transformers'.

Folders are written by transformers' own classes (`save_pretrained`), as the hub ships them.
"""
from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch

from pivot.engine import Engine, EngineConfig, Request, SamplingParams
from tests.engine.conftest import prompts, run_all

transformers = pytest.importorskip("transformers")

CHUNKED = EngineConfig(kv_capacity_tokens=1024, block_size=4, max_running_seqs=6, max_prefill_tokens=16)
EOS = [1, 2]  # a list of end ids, as GLM-4 and many instruct models ship
SHAPE = {"vocab_size": 96, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 3,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 256,
         "eos_token_id": EOS, "pad_token_id": 0}
FAMILIES = {
    "qwen3_moe": lambda: transformers.Qwen3MoeForCausalLM(transformers.Qwen3MoeConfig(
        num_experts=6, num_experts_per_tok=2, moe_intermediate_size=32, norm_topk_prob=True, mlp_only_layers=[1],
        **SHAPE,
    )),
    "glm4": lambda: transformers.Glm4ForCausalLM(transformers.Glm4Config(partial_rotary_factor=0.5, **SHAPE)),
}


@functools.lru_cache(maxsize=None)
def hf_folder(family: str, root: Path) -> tuple[Path, torch.nn.Module]:
    torch.manual_seed(3)
    model = FAMILIES[family]().eval()
    with torch.no_grad():  # sharp logits so greedy has clear winners; non-trivial norms, biases, router
        model.lm_head.weight.mul_(4.0)
        for name, p in model.named_parameters():
            if "norm" in name or name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
            if name.endswith("mlp.gate.weight"):
                p.normal_(0, 0.5)
    path = root / family
    model.save_pretrained(path)
    return path, model


@pytest.mark.parametrize("family", list(FAMILIES))
def test_greedy_matches_transformers(family: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    path, hf = hf_folder(family, tmp_path_factory.getbasetemp())
    engine = Engine.from_pretrained(path, CHUNKED)
    ps = prompts(5, seed=1)
    for i, p in enumerate(ps):
        engine.add(Request(i, p, SamplingParams(temperature=0, max_new_tokens=10)))
    outs = run_all(engine)
    for i, p in enumerate(ps):
        ref = hf.generate(torch.tensor([p]), max_new_tokens=10, do_sample=False, eos_token_id=EOS, pad_token_id=0)
        want = ref[0, len(p):].tolist()
        assert outs[i].output_ids == want, (family, i)
        assert outs[i].finish_reason == ("stop" if want[-1] in EOS else "length")
