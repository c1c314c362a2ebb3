"""TP=2 (two spawned gloo processes) equals TP=1: outputs, log-probs, weight load and read-back.
Also with the TP ranks' decode steps through the graph path (`decode_graphs="eager"`: padded
buckets, the row-parallel reduce inside the graphed forward), against TP=1 without graphs.

Dense (qwen2), MoE (qwen3_moe, every expert sliced over the two ranks), GLM-4 (fused gate_up_proj
sliced per section) and the Qwen3.5 hybrid (linear-attention heads split like attention heads).
"""

from __future__ import annotations

import json
import socket
from dataclasses import replace
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from pivot.engine import Engine, EngineConfig, Request, SamplingParams
from pivot.model import load_state_dict
from tests import forked_ranks
from tests.engine.conftest import make_model, prompts, run_all

CONFIG = EngineConfig(
    kv_capacity_tokens=256, block_size=4, max_running_seqs=4, max_prefill_tokens=16
)
PARAMS = SamplingParams(temperature=0, max_new_tokens=10, ignore_eos=True)


def _requests() -> list[Request]:
    """Each prompt twice: the copies share its blocks, so followers run copy-on-write too."""
    return [Request(i, p, PARAMS) for i, p in enumerate(prompts(3, seed=8) * 2)]


def _run_tp(engine: Engine, group: dist.ProcessGroup) -> dict:
    """Lockstep loop: the leader says whether to keep stepping (the runtime's job in production)."""
    outs = {}
    while True:
        flag = [engine.has_work()]
        dist.broadcast_object_list(flag, group_src=0, group=group)
        if not flag[0]:
            return outs
        outs.update({o.id: o for o in engine.step()})


def _worker(rank: int, port: int, root: str, graphs: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    group = dist.new_group([0, 1])
    config = replace(CONFIG, decode_graphs=graphs)
    engine = Engine.from_pretrained(Path(root) / "a", config, tp_group=group)
    result = {}
    for phase, path in (("a", None), ("b", Path(root) / "b")):
        if path is not None:
            engine.load_weights(load_state_dict(path), version=2)  # full tensors on every rank
        if rank == 0:
            for r in _requests():
                engine.add(r)
        outs = _run_tp(engine, group)
        result[phase] = {
            i: [o.output_ids, o.output_logprobs, o.weights_version] for i, o in outs.items()
        }
    full = engine.named_parameters_hf()  # collective: every rank gathers
    ref = load_state_dict(Path(root) / "b")
    result["readback_ok"] = set(full) == set(ref) and all(torch.equal(full[k], ref[k]) for k in ref)
    result["replays"] = engine.runner.graphs.replays
    if rank == 0:
        (Path(root) / "tp2.json").write_text(json.dumps(result))
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("family", "graphs"),
    [
        ("qwen2", "off"),
        ("qwen2", "eager"),
        ("qwen3_moe", "off"),
        ("glm4", "off"),
        ("qwen3_5_moe", "off"),
    ],
)
def test_tp2_equals_tp1(tmp_path: Path, family: str, graphs: str) -> None:
    for folder, seed in (("a", 0), ("b", 1)):
        if family in ("qwen2", "qwen3_moe"):
            make_model(tmp_path / folder, family, seed=seed)
        else:  # written by transformers, as the hub ships them
            pytest.importorskip("transformers")
            from tests.engine.hf_models import save_hf_model

            save_hf_model(tmp_path / folder, family, seed)
    forked_ranks.spawn(_worker, args=(_free_port(), str(tmp_path), graphs), nprocs=2)
    got = json.loads((tmp_path / "tp2.json").read_text())
    assert got["readback_ok"] and (got["replays"] > 0) == (graphs == "eager")
    for phase, version in (("a", 0), ("b", 2)):
        engine = Engine.from_pretrained(tmp_path / phase, CONFIG)
        for r in _requests():
            engine.add(r)
        want = run_all(engine)
        assert sorted(map(int, got[phase])) == sorted(want)
        for i, o in want.items():
            ids, lps, v = got[phase][str(i)]
            assert ids == o.output_ids, (phase, i)
            assert lps == pytest.approx(o.output_logprobs, abs=1e-4)
            assert v == version
