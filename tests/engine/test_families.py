"""The engine serves the hub layouts of Qwen3-MoE, GLM-4 and Qwen3.5-MoE: greedy tokens equal
transformers'; the hybrid's linear-attention state survives chunked prefill, batched decode and
an abort on one engine resumed on another.

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
PREEMPTING = EngineConfig(kv_capacity_tokens=64, block_size=8, max_running_seqs=8)  # recompute mid-run
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
    # layers 0, 1 linear attention (Gated DeltaNet), layer 2 gated full attention; MoE + shared expert
    "qwen3_5_moe": lambda: transformers.Qwen3_5MoeForConditionalGeneration(transformers.Qwen3_5MoeConfig(
        text_config={**SHAPE, "layer_types": ["linear_attention", "linear_attention", "full_attention"],
                     "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 8,
                     "linear_value_head_dim": 8, "linear_conv_kernel_dim": 4, "num_experts": 4,
                     "num_experts_per_tok": 2, "moe_intermediate_size": 32, "shared_expert_intermediate_size": 48},
        vision_config={"depth": 1, "hidden_size": 16, "intermediate_size": 32, "num_heads": 2, "out_hidden_size": 64,
                       "patch_size": 4, "spatial_merge_size": 2, "temporal_patch_size": 2},
    )),
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
            if "linear_attn.in_proj" in name or "linear_attn.out_proj" in name:
                p.mul_(10.0)  # default init leaves the linear-attention branch too small to matter
    path = root / family
    model.save_pretrained(path)
    return path, model


@pytest.mark.parametrize(("family", "config"), [(f, CHUNKED) for f in FAMILIES] + [("qwen3_5_moe", PREEMPTING)],
                         ids=[*FAMILIES, "qwen3_5_moe-preempting"])
def test_greedy_matches_transformers(family: str, config: EngineConfig, tmp_path_factory: pytest.TempPathFactory) -> None:
    path, hf = hf_folder(family, tmp_path_factory.getbasetemp())
    engine = Engine.from_pretrained(path, config)
    ps = prompts(5, seed=1)
    for i, p in enumerate(ps):
        engine.add(Request(i, p, SamplingParams(temperature=0, max_new_tokens=10)))
    outs = run_all(engine)
    for i, p in enumerate(ps):
        ref = hf.generate(torch.tensor([p]), max_new_tokens=10, do_sample=False, eos_token_id=EOS, pad_token_id=0)
        want = ref[0, len(p):].tolist()
        assert outs[i].output_ids == want, (family, i)
        assert outs[i].finish_reason == ("stop" if want[-1] in EOS else "length")


def test_hybrid_abort_resume_on_another_engine(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Partials (some mid-prefill, some mid-decode) re-prefill on a second engine and continue exactly."""
    path, _ = hf_folder("qwen3_5_moe", tmp_path_factory.getbasetemp())
    params = SamplingParams(temperature=0, max_new_tokens=12, ignore_eos=True)
    ps = prompts(6, seed=4)
    reference = Engine.from_pretrained(path, CHUNKED)
    for i, p in enumerate(ps):
        reference.add(Request(i, p, params))
    want = run_all(reference)
    a, b = Engine.from_pretrained(path, CHUNKED), Engine.from_pretrained(path, CHUNKED)
    for i, p in enumerate(ps):
        a.add(Request(i, p, params))
    got = {}
    for _ in range(5):
        got.update({o.id: o for o in a.step()})
    aborted = a.abort(range(6))
    assert any(r.output_ids for r in aborted) and len(a.runner.linear_states) == 0
    for r in aborted:
        b.add(r)
    got.update(run_all(b))
    assert {i: o.output_ids for i, o in got.items()} == {i: o.output_ids for i, o in want.items()}
    assert len(b.runner.linear_states) == 0  # finished sequences left no state behind
