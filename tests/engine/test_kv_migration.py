"""KV-preserving migration (pivot/engine/kv_export.py): a sequence aborted on one engine and
added to another with its KV handle continues with exactly the tokens an uninterrupted run
produces (the oracle: the same requests run to the end on one engine, never aborted), computes
none of its tokens again (prefill 0), and a destination that cannot take the KV re-prefills,
counted. Dense and the Qwen3.5 hybrid (its linear-attention state moves too); TP=2 moves each
rank's head slice."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from safetensors.torch import load_file

from pivot.engine import Engine, EngineConfig, Request, SamplingParams
from pivot.model import ModelArgs
from tests import forked_ranks
from tests.engine.conftest import make_model, prompts, run_all

CONFIG = EngineConfig(
    kv_capacity_tokens=512, block_size=4, max_running_seqs=8, max_prefill_tokens=256
)
GREEDY = SamplingParams(temperature=0, max_new_tokens=14, ignore_eos=True)
SEEDED = SamplingParams(temperature=1.0, top_p=0.95, max_new_tokens=14, seed=11, ignore_eos=True)
N = 6


def _model(root: Path, family: str) -> Path:
    path = root / family
    if not path.exists():
        if family == "qwen2":
            make_model(path)
        else:
            pytest.importorskip("transformers")
            from tests.engine.hf_models import save_hf_model

            save_hf_model(path, family, 0)
    return path


def _engine(path: Path, prefix: Path | None, tp_group: dist.ProcessGroup | None = None) -> Engine:
    engine = Engine.from_pretrained(path, CONFIG, tp_group=tp_group)
    if prefix is not None:
        engine.enable_kv_migration(str(prefix))
    return engine


def _reference(path: Path, params: SamplingParams) -> dict:
    ref = _engine(path, None)
    for i, p in enumerate(prompts(N, seed=5)):
        ref.add(Request(i, p, params))
    return run_all(ref)


@pytest.mark.parametrize("family", ["qwen2", "qwen3_5_moe"])
@pytest.mark.parametrize("params", [GREEDY, SEEDED], ids=["greedy", "seeded"])
def test_migrated_with_kv_continues_exactly(
    tmp_path: Path, family: str, params: SamplingParams
) -> None:
    path = _model(tmp_path, family)
    want = _reference(path, params)
    a, b = _engine(path, tmp_path / "kv_a"), _engine(path, tmp_path / "kv_b")
    for i, p in enumerate(prompts(N, seed=5)):
        a.add(Request(i, p, params))
    got = {}
    for _ in range(5):  # every prompt prefilled, a few tokens decoded
        got.update({o.id: o for o in a.step()})
    moved = a.abort([0, 2, 3, 5])
    assert all(
        r.kv is not None and r.kv.num_tokens == len(r.prompt_ids) + len(r.output_ids) - 1
        for r in moved
    )
    assert all(os.path.exists(f"{r.kv.path}_r0") for r in moved)
    b.add_all(list(moved))
    assert b.stats().kv_imported == 4 and b.stats().kv_fallbacks == 0
    assert not any(os.path.exists(f"{r.kv.path}_r0") for r in moved)  # consumed
    got.update(run_all(b))
    got.update(run_all(a))
    assert (
        b.stats().prefill_tokens == b.stats().reprefill_tokens == 0
    )  # every moved token's K/V came along
    assert b.stats().kv_imported_tokens == sum(r.kv.num_tokens for r in moved)
    for i in range(N):
        assert got[i].output_ids == want[i].output_ids, i
        assert got[i].output_logprobs == pytest.approx(want[i].output_logprobs, abs=1e-4)


def test_moved_back_and_forth_and_mid_prefill(tmp_path: Path) -> None:
    """Moved twice (a -> b -> a), and aborted halfway through its prompt's prefill chunks: only
    the uncomputed rest is prefilled at the destination."""
    path = _model(tmp_path, "qwen2")
    want = _reference(path, GREEDY)
    small = EngineConfig(
        kv_capacity_tokens=512, block_size=4, max_running_seqs=8, max_prefill_tokens=6
    )
    a = Engine.from_pretrained(path, small)
    a.enable_kv_migration(str(tmp_path / "kv_a"))
    b = _engine(path, tmp_path / "kv_b")
    ps = prompts(N, seed=5)
    for i, p in enumerate(ps):
        a.add(Request(i, p, GREEDY))
    got = {o.id: o for o in a.step()}  # 6 prefill tokens: sequence 0 is partly computed
    first = a.abort(list(range(N)))
    computed = {r.id: r.kv.num_tokens for r in first if r.kv is not None}
    assert 0 < computed[0] < len(ps[0]) - 1
    b.add_all(list(first))
    for _ in range(4):
        got.update({o.id: o for o in b.step()})
    assert b.stats().prefill_tokens == sum(len(p) for p in ps) - sum(computed.values())
    a.add_all(list(b.abort(list(range(N)))))
    got.update(run_all(a))
    assert a.stats().kv_fallbacks == 0
    for i in range(N):
        assert got[i].output_ids == want[i].output_ids, i


def test_destination_that_cannot_take_it_reprefills_counted(tmp_path: Path) -> None:
    path = _model(tmp_path, "qwen2")
    want = _reference(path, GREEDY)
    a, b = _engine(path, tmp_path / "kv_a"), _engine(path, tmp_path / "kv_b")
    b.load_weights(
        b.weight_buffers(), version=3
    )  # same weights, other version: its K/V are not b's
    for i, p in enumerate(prompts(N, seed=5)):
        a.add(Request(i, p, GREEDY))
    got = {}
    for _ in range(5):
        got.update({o.id: o for o in a.step()})
    moved = a.abort(list(range(N)))
    b.add_all(list(moved))
    st = b.stats()
    assert (st.kv_imported, st.kv_fallbacks) == (0, N)
    assert st.kv_fallback_tokens == sum(r.kv.num_tokens for r in moved)
    assert not any(os.path.exists(f"{r.kv.path}_r0") for r in moved)  # discarded, not leaked
    got.update(run_all(b))
    assert b.stats().prefill_tokens == sum(len(r.prompt_ids) + len(r.output_ids) for r in moved)
    assert b.stats().reprefill_tokens == sum(
        len(r.prompt_ids) + len(r.output_ids) for r in moved if r.output_ids
    )
    for i in range(N):
        assert got[i].output_ids == want[i].output_ids, i


# ---- TP=2 ------------------------------------------------------------------------------------
def _run_tp(engines: list[Engine], group: dist.ProcessGroup, steps: int | None = None) -> dict:
    outs: dict = {}
    n = 0
    while steps is None or n < steps:
        flag = [any(e.has_work() for e in engines)]
        dist.broadcast_object_list(flag, group_src=0, group=group)
        if not flag[0]:
            break
        for e in engines:
            outs.update({o.id: o for o in e.step()})
        n += 1
    return outs


def _tp_worker(rank: int, port: int, root: str, family: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    group = dist.new_group([0, 1])
    path = Path(root) / family
    ref, a, b = (
        _engine(path, None if k == "ref" else Path(root) / f"kv_{k}", group)
        for k in ("ref", "a", "b")
    )
    reqs = [Request(i, p, GREEDY) for i, p in enumerate(prompts(N, seed=5))]
    if rank == 0:
        for r in reqs:
            ref.add(r)
            a.add(r)
    want = _run_tp([ref], group)
    got = _run_tp([a], group, steps=5)
    moved = a.abort([0, 2, 3, 5])  # every rank: each writes its own head slice
    result: dict = {}
    if rank == 0:
        result["handles"] = [(r.kv.tp_size, r.kv.num_tokens) for r in moved]
        result["slice_heads"] = [
            load_file(f"{moved[0].kv.path}_r{k}")["k"].shape[2] for k in (0, 1)
        ]
        result["slices_differ"] = not torch.equal(
            load_file(f"{moved[0].kv.path}_r0")["k"], load_file(f"{moved[0].kv.path}_r1")["k"]
        )
    shared = [list(moved)]  # the runtime forwards the leader's Generate to its followers
    dist.broadcast_object_list(shared, group_src=0, group=group)
    b.add_all(shared[0])  # every rank: each reads its own
    got.update(_run_tp([a, b], group))
    if rank == 0:
        st = b.stats()
        result.update(
            imported=st.kv_imported,
            prefill=st.prefill_tokens,
            equal=sorted(got) == sorted(want)
            and all(got[i].output_ids == want[i].output_ids for i in want),
        )
        (Path(root) / "tp2.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen2", "qwen3_5_moe"])
def test_tp2_moves_each_ranks_head_slice(tmp_path: Path, family: str) -> None:
    _model(tmp_path, family)
    forked_ranks.spawn(_tp_worker, args=(_free_port(), str(tmp_path), family), nprocs=2)
    result = json.loads((tmp_path / "tp2.json").read_text())
    heads = ModelArgs.load(tmp_path / family).num_key_value_heads
    assert result["slice_heads"] == [heads // 2, heads // 2] and result["slices_differ"]
    assert all(tp == 2 for tp, _ in result["handles"])
    assert (result["imported"], result["prefill"], result["equal"]) == (4, 0, True)
