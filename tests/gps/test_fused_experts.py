"""GPS with fused experts: gate_up_proj [E, 2I, H] is stored in its split view [E, 2, I, H], so a
TP rank's share (a slice of the gate half and of the up half) is one box; Reads hand back the
model's shapes, in place into the engine's buffers; sglang-style whole reads get the hub's tensors."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from pivot.dist import Slot
from pivot.engine.tp import shard_tensor
from pivot.gps.layout import Place, parallel_layout, split_views
from pivot.gps.store import GPSStore, HostInfo
from pivot.gps.torch_specs import specs_from_checkpoint
from pivot.memory.footprint import from_folder
from pivot.model import load_state_dict
from pivot.runtime.weights.service import WeightService
from tests.model.fixtures.hub_layouts import write_tiny

GATE_UP, DOWN = "model.layers.0.mlp.experts.gate_up_proj", "model.layers.0.mlp.experts.down_proj"


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny("Qwen3.5-122B-A10B", tmp_path_factory.mktemp("q35") / "m", shards=2)


def test_layout_boxes_of_fused_experts(folder: Path) -> None:
    specs = specs_from_checkpoint(folder)
    e, two_i, h = next(s.shape for s in specs if s.name == GATE_UP)
    i = two_i // 2
    layout = parallel_layout("genrm", split_views(specs), [0, 1], [0, 0], tp=2)
    for t in range(2):
        mine = {n: p for n, _, p in layout.held_by(Place(0, t))}
        assert mine[GATE_UP].box == ((0, e), (0, 2), (t * i // 2, (t + 1) * i // 2), (0, h))
        assert mine[DOWN].box == ((0, e), (0, h), (t * i // 2, (t + 1) * i // 2))
    with pytest.raises(
        ValueError, match=r"'model.layers.\d+.mlp.experts.gate_up_proj' .* is not in its split view"
    ):
        parallel_layout("genrm", specs, [0, 1], [0, 0], tp=2)


def _halves(t: torch.Tensor, rank: int) -> torch.Tensor:
    """Rank `rank` of 2's part of a fused gate_up [E, 2I, H], by hand: the gate's and the up's slice."""
    i = t.shape[1] // 2
    lo, hi = rank * i // 2, (rank + 1) * i // 2
    return torch.cat([t[:, lo:hi], t[:, i + lo : i + hi]], dim=1)


def test_read_gives_each_rank_its_halves(folder: Path) -> None:
    full = load_state_dict(folder)
    specs = specs_from_checkpoint(folder)
    kv, ns, host_of = dist.HashStore(), "gpsf" + uuid.uuid4().hex[:8], (0, 0)
    stores = [
        GPSStore(kv, HostInfo(r, 0, r, host_of), namespace=ns) for r in (0, 1)
    ]  # both ranks of one host
    try:
        services = [
            WeightService(
                st,
                {"policy": specs, "genrm": specs},
                host_of,
                Slot("train", 0, ()),
                0,
                "cpu",
                whole=frozenset({"rollout"}),
            )
            for st in stores
        ]
        services[0].publish("genrm", full)
        reward = Slot("reward", 0, (0, 1))
        for rank, service in enumerate(services):
            out = {
                n: torch.empty(shard_tensor(n, t, rank, 2).shape, dtype=t.dtype)
                for n, t in full.items()
            }
            got, _ = service.read("genrm", reward, None, out=out)
            for name, t in full.items():
                assert got[name] is out[name], name  # filled in place, in the engine's shape
                if name.endswith("experts.gate_up_proj"):
                    assert torch.equal(got[name], _halves(t, rank)), name
                elif name.endswith("experts.down_proj"):
                    assert torch.equal(got[name], t.chunk(2, dim=2)[rank]), name
                else:  # the dense split, checked against its own oracle in tests/runtime/test_gps_read_layout.py
                    assert torch.equal(got[name], shard_tensor(name, t, rank, 2)), name
        whole, _ = services[0].read(
            "genrm", Slot("rollout", 0, (0, 1)), None
        )  # an sglang replica's leader
        assert all(torch.equal(whole[n], full[n]) for n in full)
        assert (
            whole[GATE_UP].shape == full[GATE_UP].shape
        )  # the hub's [E, 2I, H], as sglang loads it
    finally:
        for st in reversed(stores):
            st.close()


def test_memory_plan_charges_each_device_its_slice(folder: Path) -> None:
    fp = from_folder(folder, "bfloat16")
    assert not any(s.name.startswith(("mtp.", "model.visual.")) for s in fp.specs)
    experts = sum(s.nbytes for s in fp.specs if ".mlp.experts." in s.name)
    whole_at_tp2 = fp.tp_bytes(2)
    assert fp.tp_bytes(1) - whole_at_tp2 >= experts // 2  # every expert byte is split
