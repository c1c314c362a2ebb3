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
from tests.engine.hf_models import EOS, FAMILIES, save_hf_model  # noqa: E402 (needs transformers)

CHUNKED = EngineConfig(
    kv_capacity_tokens=1024, block_size=4, max_running_seqs=6, max_prefill_tokens=16
)
PREEMPTING = EngineConfig(
    kv_capacity_tokens=64, block_size=8, max_running_seqs=8
)  # recompute mid-run


@functools.cache
def hf_folder(family: str, root: Path) -> tuple[Path, torch.nn.Module]:
    path = root / family
    return path, save_hf_model(path, family, seed=3)


@pytest.mark.parametrize(
    ("family", "config"),
    [(f, CHUNKED) for f in FAMILIES] + [("qwen3_5_moe", PREEMPTING)],
    ids=[*FAMILIES, "qwen3_5_moe-preempting"],
)
def test_greedy_matches_transformers(
    family: str, config: EngineConfig, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path, hf = hf_folder(family, tmp_path_factory.getbasetemp())
    engine = Engine.from_pretrained(path, config)
    ps = prompts(5, seed=1)
    for i, p in enumerate(ps):
        engine.add(Request(i, p, SamplingParams(temperature=0, max_new_tokens=10)))
    outs = run_all(engine)
    for i, p in enumerate(ps):
        ref = hf.generate(
            torch.tensor([p]), max_new_tokens=10, do_sample=False, eos_token_id=EOS, pad_token_id=0
        )
        want = ref[0, len(p) :].tolist()
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


def test_hybrid_groups_share_no_prefix(tmp_path_factory: pytest.TempPathFactory) -> None:
    """GRPO-style copies of a prompt, one a prefix of another: the hybrid computes every token of
    every sequence (a shared KV prefix would skip its recurrent state) and each output still equals
    transformers' greedy tokens for that prompt."""
    path, hf = hf_folder("qwen3_5_moe", tmp_path_factory.getbasetemp())
    base = prompts(2, seed=6, lo=9, hi=14)
    ps = [base[0]] * 3 + [base[1]] * 2 + [base[1] + base[0][:5]]
    engine = Engine.from_pretrained(path, CHUNKED)
    for i, p in enumerate(ps):
        engine.add(Request(i, p, SamplingParams(temperature=0, max_new_tokens=8)))
    outs = run_all(engine)
    for i, p in enumerate(ps):
        ref = hf.generate(
            torch.tensor([p]), max_new_tokens=8, do_sample=False, eos_token_id=EOS, pad_token_id=0
        )
        assert outs[i].output_ids == ref[0, len(p) :].tolist(), i
    s = engine.stats()
    assert s.prefix_hit_tokens == 0 and s.prefill_tokens == sum(map(len, ps))
    assert not engine.blocks.index and engine.blocks.num_free_blocks == engine.blocks.num_blocks
