"""Decode steps replayed from graphs (pivot/engine/decode_graphs.py), checked on CPU through the
same code path with an eager replay (`decode_graphs="eager"`): bucket choice, padding, the
static buffers' reuse, the fixed-width attention and the fallbacks. Oracle: the same engine
with graphs off (itself checked against transformers in test_generation.py); on CUDA, the real
capture against the same oracle."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from pivot.engine import Engine, EngineConfig, Request, SamplingParams
from pivot.engine.decode_graphs import bucket_for, graph_grid, size_buckets, thin
from pivot.model import CausalLM
from tests.engine.conftest import make_model, prompts, run_all, tiny_args

# 4-token blocks: contexts of 5-60 tokens span 2-15 blocks, so several width buckets are used
CFG = EngineConfig(kv_capacity_tokens=2048, block_size=4, max_running_seqs=7)


def generate(engine: Engine, n: int = 7, new: int = 30, seed: int = 3) -> dict:
    """`n` requests of `new`, `new` - 4, ... tokens: the batch shrinks as they finish."""
    for i, p in enumerate(prompts(n, seed=seed, lo=3, hi=30)):
        engine.add(Request(i, p, SamplingParams(temperature=0, max_new_tokens=max(2, new - 4 * i))))
    return run_all(engine)


def engine(path: Path, mode: str, device: str = "cpu", **kw: object) -> Engine:
    cfg = replace(CFG, decode_graphs=mode, **kw)
    e = Engine.from_pretrained(path, cfg, device=device)
    return e


def test_buckets_pad_by_less_than_half_and_end_at_the_largest() -> None:
    assert size_buckets(7) == [1, 2, 3, 4, 6, 7]
    assert size_buckets(256)[-4:] == [96, 128, 192, 256]
    assert size_buckets(1) == [1]
    sizes = size_buckets(300)
    assert all(bucket_for(n, sizes) < 1.5 * n for n in range(2, 301))
    assert bucket_for(5, sizes) == 6 and bucket_for(301, sizes) is None


def test_greedy_tokens_and_logprobs_equal_eager_and_the_cache_outside_scratch(
    tiny_path: Path,
) -> None:
    off, graphed = engine(tiny_path, "off"), engine(tiny_path, "eager")
    ref, got = generate(off), generate(graphed)
    assert {i: o.output_ids for i, o in got.items()} == {i: o.output_ids for i, o in ref.items()}
    for i in ref:
        assert got[i].output_logprobs == pytest.approx(ref[i].output_logprobs, abs=1e-5)
    g = graphed.runner.graphs
    assert g.replays > 0 and g.captures == len(g.graphs)
    # batches 7 -> 1 as sequences finish: buckets 7, 6, 4, 3, 2, 1 at several widths
    assert {b for b, _ in g.graphs} <= set(size_buckets(7)) and len(g.graphs) >= 4
    # padding rows wrote only to the scratch block: every sequence's K/V is the eager run's
    slots = CFG.kv_capacity_tokens
    assert (graphed.runner.cache.k[:, :slots] - off.runner.cache.k[:, :slots]).abs().max() < 1e-5
    assert (graphed.runner.cache.v[:, :slots] - off.runner.cache.v[:, :slots]).abs().max() < 1e-5


@pytest.mark.parametrize("temperature", [0.0, 1.0])
@pytest.mark.parametrize("budget", [1, 3])
def test_a_prefill_cut_to_one_token_by_the_budget_keeps_the_rows_and_sequences_paired(
    tiny_path: Path, budget: int, temperature: float
) -> None:
    """A step of one-token chunks where one is a prefill chunk cut short (it does not sample) is
    replayed like a decode step: the graph must hand back only the sampling rows, in order."""

    def run(mode: str) -> dict:
        e = engine(tiny_path, mode, max_prefill_tokens=budget)
        for i, p in enumerate(prompts(7, seed=3, lo=3, hi=30)):
            e.add(Request(i, p, SamplingParams(temperature=temperature, max_new_tokens=12)))
        outs = run_all(e)
        if mode == "eager":
            assert e.runner.graphs.replays > 0
        return outs

    ref, got = run("off"), run("eager")
    assert {i: o.output_ids for i, o in got.items()} == {i: o.output_ids for i, o in ref.items()}
    for i in ref:
        assert got[i].output_logprobs == pytest.approx(ref[i].output_logprobs, abs=1e-4)


def test_the_grid_keeps_within_the_cap_and_always_reaches_the_largest() -> None:
    for batch, widest, cap in [(256, 2048, 64), (32, 1024, 64), (7, 15, 4), (300, 5, 3), (1, 1, 1)]:
        batches, widths = graph_grid(batch, widest, "sdpa", cap)
        assert len(batches) * len(widths) <= cap
        assert batches[-1] == batch and widths[-1] == widest  # every step still has a bucket
        assert batches == sorted(set(batches)) and widths == sorted(set(widths))
    batches, widths = graph_grid(256, 2048, "flash", 64)
    assert widths == [2048] and batches == size_buckets(256)  # one width serves every context
    assert thin([1, 2, 4, 8, 16, 32, 64], 3) == [4, 16, 64]  # even on a log scale


def test_every_graph_is_captured_when_the_replica_starts_never_mid_rollout(
    tiny_path: Path,
) -> None:
    e = engine(tiny_path, "eager")
    g = e.runner.graphs
    grid = len(g.batch_sizes) * len(g.widths)
    assert g.captures == len(g.graphs) == grid > 1  # before any step
    generate(e)
    assert g.replays > 0 and g.captures == grid
    # one logits buffer serves every graph: no graph keeps a [bucket, vocab] output of its own
    outputs = {graph.output.data_ptr() for graph in g.graphs.values() if graph.output.numel()}
    assert outputs == {g.bufs.logits.data_ptr()}


def test_a_small_cap_thins_the_buckets_and_keeps_the_tokens(tiny_path: Path) -> None:
    capped = engine(tiny_path, "eager", max_decode_graphs=4)
    got, ref = generate(capped), generate(engine(tiny_path, "off"))
    assert len(capped.runner.graphs.graphs) <= 4 and capped.runner.graphs.replays > 0
    assert {i: o.output_ids for i, o in got.items()} == {i: o.output_ids for i, o in ref.items()}


def test_static_buffers_are_allocated_once_and_shared_by_every_graph(tiny_path: Path) -> None:
    e = engine(tiny_path, "eager")
    generate(e)
    bufs = e.runner.graphs.bufs
    ptr = bufs.tokens.data_ptr()
    generate(e, seed=4)
    assert e.runner.graphs.bufs is bufs and bufs.tokens.data_ptr() == ptr
    assert bufs.tokens.shape == (CFG.max_running_seqs,)


def test_prefill_steps_run_eagerly(tiny_path: Path) -> None:
    e = engine(tiny_path, "eager")
    e.add(Request(0, list(range(2, 30)), SamplingParams(temperature=0, max_new_tokens=1)))
    run_all(e)  # one step: the prefill, which samples the only token
    assert e.runner.graphs.replays == 0


def test_weights_loaded_in_place_are_what_the_graphs_compute_with(
    tiny_path: Path, tmp_path: Path
) -> None:
    """An update mid-generation: the graphed engine continues with the new weights exactly as the
    eager one, without capturing again (on CUDA the graphs read the parameters' storage)."""
    other = make_model(tmp_path, seed=7).state_dict()
    runs = {}
    for mode in ("off", "eager"):
        e = engine(tiny_path, mode)
        for i, p in enumerate(prompts(5, seed=5, lo=3, hi=20)):
            e.add(Request(i, p, SamplingParams(temperature=0, max_new_tokens=24)))
        for _ in range(8):
            e.step()
        captured = e.runner.graphs.captures
        buffers = e.weight_buffers()
        for name, t in other.items():  # the GPS Read's way: into the engine's own storage
            if name in buffers:
                buffers[name].copy_(t)
        e.load_weights(buffers, version=1)
        runs[mode] = run_all(e)
        if mode == "eager":
            assert e.runner.graphs.captures == captured  # an update in place captures nothing
    assert {i: o.output_ids for i, o in runs["eager"].items()} == {
        i: o.output_ids for i, o in runs["off"].items()
    }
    unchanged = run_all_of(engine(tiny_path, "eager"), 5, 24)
    assert unchanged != {i: o.output_ids for i, o in runs["eager"].items()}  # the update mattered


def run_all_of(e: Engine, n: int, new: int) -> dict:
    for i, p in enumerate(prompts(n, seed=5, lo=3, hi=20)):
        e.add(Request(i, p, SamplingParams(temperature=0, max_new_tokens=new)))
    return {i: o.output_ids for i, o in run_all(e).items()}


def test_release_drops_the_graphs_and_a_shift_up_captures_what_its_batches_reach(
    tiny_path: Path,
) -> None:
    """A shift up's Read captures nothing; each bucket is captured when its first batch comes,
    once, and only the buckets the batches reach (here 2 sequences: buckets 2 and 1)."""
    e = engine(tiny_path, "eager")
    g = e.runner.graphs
    ref = generate(e, n=2)
    grid = g.captures
    weights = e.named_parameters_hf()
    e.release()
    assert not g.graphs and g.bufs is None
    e.resume()
    e.load_weights(weights, version=1)
    assert g.captures == grid and not g.graphs  # nothing on the shift's critical path
    again = generate(e, n=2)
    assert {i: o.output_ids for i, o in again.items()} == {i: o.output_ids for i, o in ref.items()}
    assert {b for b, _ in g.graphs} == {1, 2} and g.captures == grid + len(g.graphs)
    assert e.stats().graphs_captured == g.captures


@pytest.mark.parametrize("family", ["qwen3_moe"])
def test_models_that_sync_with_the_host_are_never_graphed(tmp_path: Path, family: str) -> None:
    make_model(tmp_path, family=family)
    e = engine(tmp_path, "eager")
    generate(e, n=3, new=6)
    assert e.runner.graphs.replays == 0 and "MoE" in e.runner.graphs.why_not


def test_cuda_graphs_on_a_cpu_engine_is_one_line(tiny_path: Path) -> None:
    with pytest.raises(ValueError, match="decode_graphs='cuda' on device cpu"):
        engine(tiny_path, "cuda")


def test_auto_captures_nothing_on_cpu(tiny_path: Path) -> None:
    e = engine(tiny_path, "auto")
    generate(e, n=3, new=5)
    assert e.runner.graphs.replays == 0


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_graphs_give_the_eager_engines_greedy_tokens(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = CausalLM(tiny_args()).to(torch.bfloat16)
    with torch.no_grad():
        model.lm_head.weight.mul_(4.0)
    from pivot.model import save_pretrained

    save_pretrained(model, tmp_path)
    ref = generate(engine(tmp_path, "off", "cuda"))
    graphed = engine(tmp_path, "auto", "cuda")
    got = generate(graphed)
    assert graphed.runner.graphs.replays > 0
    same = sum(got[i].output_ids == ref[i].output_ids for i in ref)
    assert same == len(ref), f"{same} of {len(ref)} sequences equal"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_bf16_cuda_graphs_replay_what_the_same_path_computes_eagerly(tmp_path: Path) -> None:
    """In bf16 the graphed and the eager attention may round apart; the capture itself must not:
    replays give the tokens and log-probs of the very same path run without capturing."""
    torch.manual_seed(0)
    from pivot.model import save_pretrained

    save_pretrained(CausalLM(tiny_args()), tmp_path)

    def bf16(mode: str) -> Engine:
        return Engine.from_pretrained(
            tmp_path, replace(CFG, decode_graphs=mode), dtype="bfloat16", device="cuda"
        )

    ref, graphed = generate(bf16("eager")), bf16("cuda")
    got = generate(graphed)
    assert graphed.runner.graphs.replays > 0
    assert {i: o.output_ids for i, o in got.items()} == {i: o.output_ids for i, o in ref.items()}
    for i in ref:
        assert got[i].output_logprobs == pytest.approx(ref[i].output_logprobs, abs=1e-3)


def test_a_dropped_engine_frees_its_cache_without_the_garbage_collector(tiny_path: Path) -> None:
    """The graphs hold the model, not the runner: no reference cycle keeps the KV cache alive."""
    import gc
    import weakref

    e = engine(tiny_path, "eager")
    generate(e, n=2, new=3)
    cache = weakref.ref(e.runner.cache.k)
    gc.disable()
    try:
        del e
        assert cache() is None
    finally:
        gc.enable()
