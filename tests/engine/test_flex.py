"""The flex paged kernel (pivot/engine/flex_paged.py), run compiled on this CPU.

Oracles: per-query attention written out (tests/engine/test_attention.py), and the gather
reference engine, itself checked against transformers (test_generation.py, test_families.py):
greedy tokens equal and log-probs within fp32 rounding, for every family, under budget-cut
prefill, with decode graphs (eager replay) and across a KV migration. What a decode step moves
is counted at the dispatcher (pivot/engine/traffic.py), beside the gather reference measured in
the same test, and the compiled kernel's own allocations are read from its generated code.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from torch._inductor.utils import run_and_get_code

from pivot.engine import Engine, EngineConfig, Request, SamplingParams
from pivot.engine.flex_paged import FlexTables, _compiled, decode
from pivot.engine.traffic import TrafficCounter
from tests.engine.conftest import prompts, run_all

CHUNKED = EngineConfig(
    kv_capacity_tokens=1024, block_size=4, max_running_seqs=6, max_prefill_tokens=16
)
GREEDY = SamplingParams(temperature=0, max_new_tokens=10)


def _greedy(path: Path, config: EngineConfig, n: int = 5) -> dict:
    engine = Engine.from_pretrained(path, config)
    for i, p in enumerate(prompts(n, seed=1)):
        engine.add(Request(i, p, GREEDY))
    return run_all(engine)


def _same(got: dict, want: dict) -> None:
    assert {i: o.output_ids for i, o in got.items()} == {i: o.output_ids for i, o in want.items()}
    for i in want:
        assert got[i].output_logprobs == pytest.approx(want[i].output_logprobs, abs=1e-4)


@functools.cache
def _hf_folder(family: str, root: Path) -> Path:
    from tests.engine.hf_models import save_hf_model

    path = root / family
    save_hf_model(path, family, seed=3)
    return path


def _families() -> list[str]:
    try:
        from tests.engine.hf_models import FAMILIES
    except ImportError:  # transformers absent: the hub layouts cannot be written
        return []
    return list(FAMILIES)


@pytest.mark.slow
@pytest.mark.parametrize("family", _families())
def test_every_family_gives_the_gather_references_tokens(
    family: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Prefill cut into 16-token chunks over 4-token blocks (tiles straddle chunk and block
    edges), then decoding, eagerly and through the graph path where the family is graphed."""
    path = _hf_folder(family, tmp_path_factory.getbasetemp())
    want = _greedy(path, replace(CHUNKED, attention="gather", decode_graphs="off"))
    _same(_greedy(path, replace(CHUNKED, attention="flex", decode_graphs="off")), want)
    _same(_greedy(path, replace(CHUNKED, attention="flex", decode_graphs="eager")), want)


@pytest.mark.slow
def test_tiny_policy_with_graphs_gives_the_gather_references_tokens(tiny_path: Path) -> None:
    want = _greedy(tiny_path, replace(CHUNKED, attention="gather", decode_graphs="off"), n=7)
    flex = Engine.from_pretrained(
        tiny_path, replace(CHUNKED, attention="flex", decode_graphs="eager")
    )
    for i, p in enumerate(prompts(7, seed=1)):
        flex.add(Request(i, p, GREEDY))
    _same(run_all(flex), want)
    g = flex.runner.graphs
    assert g.replays > 0 and g.widths == [g.widths[-1]]  # one width serves every context


def test_migrated_with_kv_continues_exactly(tmp_path: Path, tiny_path: Path) -> None:
    """Aborted mid-decode on one flex engine, exported, continued on another from its K/V."""
    cfg = replace(CHUNKED, attention="flex", max_prefill_tokens=256)
    params = SamplingParams(temperature=0, max_new_tokens=14, ignore_eos=True)
    ps = prompts(6, seed=5)
    ref = Engine.from_pretrained(tiny_path, replace(cfg, attention="gather"))
    for i, p in enumerate(ps):
        ref.add(Request(i, p, params))
    want = run_all(ref)
    a, b = Engine.from_pretrained(tiny_path, cfg), Engine.from_pretrained(tiny_path, cfg)
    a.enable_kv_migration(str(tmp_path / "kv_a"))
    b.enable_kv_migration(str(tmp_path / "kv_b"))
    for i, p in enumerate(ps):
        a.add(Request(i, p, params))
    got = {}
    for _ in range(5):
        got.update({o.id: o for o in a.step()})
    b.add_all(list(a.abort([0, 2, 3, 5])))
    got.update(run_all(b))
    got.update(run_all(a))
    assert b.stats().kv_imported == 4 and b.stats().reprefill_tokens == 0
    _same(got, want)


def _decoding_engine(path: Path, kernel: str, graphs: str) -> tuple[Engine, int]:
    """An engine with 8 sequences of about 200 tokens, every one decoding; and their live K/V bytes."""
    cfg = EngineConfig(
        kv_capacity_tokens=4096, block_size=16, max_running_seqs=8, max_prefill_tokens=2048,
        attention=kernel, decode_graphs=graphs,
    )  # fmt: skip
    engine = Engine.from_pretrained(path, cfg)
    g = torch.Generator().manual_seed(7)
    for i in range(8):
        prompt = torch.randint(2, 96, (190 + 3 * i,), generator=g).tolist()
        engine.add(
            Request(i, prompt, SamplingParams(temperature=0, max_new_tokens=30, ignore_eos=True))
        )
    for _ in range(3):  # the prefill, then two decode steps (graphs captured, compiled)
        engine.step()
    a = engine.args
    per_token = a.num_hidden_layers * 2 * a.num_key_value_heads * a.head_dim * 4
    live = sum(len(s.token_ids) for s in engine._seqs.values()) * per_token
    return engine, live


@pytest.mark.parametrize("graphs", ["off", "eager"])
def test_a_decode_step_creates_under_a_quarter_of_the_live_kv(tiny_path: Path, graphs: str) -> None:
    """Counted at the dispatcher: the gather reference creates (and re-reads) a copy of every
    live K/V byte each step; flex creates a sliver of it and reads the K/V once."""
    counted = {}
    for kernel in ("gather", "flex"):
        engine, live = _decoding_engine(tiny_path, kernel, graphs)
        with TrafficCounter() as c:
            engine.step()
        counted[kernel] = (c.traffic, live)
    gather, live = counted["gather"]
    assert gather.created >= 0.9 * live  # the reference copies the K/V out (the defect)
    flex, live = counted["flex"]
    assert flex.created <= 0.25 * live, (flex.created / live, flex.created_by_op.most_common(4))
    # K/V read once: each live block once per layer (the last, partial, block rounds up)
    assert live <= flex.flex_kv_read <= 1.1 * live
    assert flex.read < 0.6 * gather.read


def test_the_compiled_kernel_allocates_only_its_output() -> None:
    """The CPU kernel inductor generates for a decode step: one buffer, the output's size."""
    bs, blocks, batch, hq, hkv, d = 16, 40, 4, 8, 2, 32
    kc = torch.randn((blocks + 1) * bs, hkv, d)
    vc = torch.randn((blocks + 1) * bs, hkv, d)
    tables = FlexTables(batch, blocks, bs, torch.device("cpu"))
    ctx = torch.tensor([33, 100, 7, 64])
    tables.fill(ctx, torch.randperm(blocks)[: batch * 7].view(batch, 7), batch)
    q = torch.randn(batch, hq, d)
    _compiled.cache_clear()  # a fresh compile, whose code is returned
    out, code = run_and_get_code(decode, q, kc, vc, tables.mask(batch, kc.shape[0]))
    allocations = [
        line for src in code for line in src.splitlines() if "empty_strided_cpu((" in line
    ]
    assert len(allocations) == 1 and f"({batch}, {hq}, 1, {d})" in allocations[0], allocations
    assert out.shape == (batch, hq, d)


def test_one_width_of_graphs_and_a_shift_up_captures_only_what_it_reaches(tiny_path: Path) -> None:
    """Flex reads each row's own blocks, so its graphs are one per batch bucket, where the gather
    reference needs one per (batch, context width); after a shift up (release, resume, the Read)
    a decode step captures its own bucket, once, and an update in place captures nothing."""
    cfg = replace(CHUNKED, decode_graphs="eager", max_running_seqs=8, max_seq_len=128)
    flex = Engine.from_pretrained(tiny_path, replace(cfg, attention="flex"))
    gather = Engine.from_pretrained(tiny_path, replace(cfg, attention="gather"))
    g = flex.runner.graphs
    assert g.captures == len(g.graphs) == len(g.batch_sizes) and len(g.widths) == 1
    assert gather.runner.graphs.captures > 2 * g.captures
    grid = g.captures
    weights = flex.named_parameters_hf()
    flex.release()
    flex.resume()
    flex.load_weights(weights, version=1)
    assert g.captures == grid
    for i, p in enumerate(prompts(3, seed=2)):
        flex.add(Request(i, p, SamplingParams(temperature=0, max_new_tokens=3, ignore_eos=True)))
    run_all(flex)  # decode steps of at most three sequences: buckets 3 and below, each once
    reached = {b for b, _ in g.graphs}
    assert 3 in reached and reached <= {1, 2, 3} and g.captures == grid + len(reached)
    flex.load_weights(flex.weight_buffers(), version=2)  # in place: nothing captured
    assert g.captures == grid + len(reached)
    # the widest graph is the role's longest sequence (engine.max_seq_len), not the capacity
    assert gather.runner.graphs.widths[-1] * 4 == 128 < flex.max_len
