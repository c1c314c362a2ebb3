"""The inference role's shifts (pivot/roles/inference.py): a production engine's replica shifts
down as one, its parked ranks leaving only after the leader's release is done (vLLM's
`sleep(level=2)` fails if another role allocates on one of its devices meanwhile), at a barrier
that touches no device; an embedded replica captures no decode graph while it shifts up, only
the buckets its first batches reach, after."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch.distributed as dist
from trainer_harness import spawn

from pivot.config import EngineConfig, ModelConfig
from pivot.dist import ClusterSpec, SlotTable, create_groups, fence_name
from pivot.engine import AbortResult, ParkedEngine, Request, SamplingParams
from pivot.model import load_state_dict
from pivot.roles.inference import InferenceRole
from tests.engine.conftest import make_model

RELEASE_S = 0.5


class SlowRelease:
    """What a leader's vLLM engine does on release, as far as the fence is concerned: it takes
    a while."""

    def release(self) -> AbortResult:
        time.sleep(RELEASE_S)
        return AbortResult([], [])


def _shift_down(rank: int, world: int, group: dist.ProcessGroup, folder: str) -> None:
    role = InferenceRole(
        role="reward",
        model_path=Path(folder),
        engine_cfg=EngineConfig(backend="vllm"),
        model_cfg=ModelConfig(),
        device="cpu",
        seed=0,
    )
    role.engines, role.slot = {0: SlowRelease() if rank == 0 else ParkedEngine()}, 0
    dist.barrier(group=group)
    t0 = time.monotonic()
    role.shift_down(group)
    Path(folder, f"rank{rank}.json").write_text(json.dumps({"left_after": time.monotonic() - t0}))


@pytest.mark.slow
def test_a_parked_rank_leaves_only_after_the_leaders_release(tmp_path: Path) -> None:
    spawn(_shift_down, 2, str(tmp_path))
    parked = json.loads((tmp_path / "rank1.json").read_text())["left_after"]
    assert parked >= RELEASE_S * 0.9  # it waited for the leader's release


def _groups(rank: int, world: int, group: dist.ProcessGroup, folder: str) -> None:
    spec = ClusterSpec(world_size=2, rank=rank, local_world_size=2)
    table = SlotTable.build(spec, rollout_tp=2, reward_tp=1, train_devices=1)
    groups = create_groups(table)
    names = sorted(groups)
    Path(folder, f"rank{rank}.json").write_text(json.dumps(names))
    fence = groups[fence_name(table.rollout[0])]
    assert fence is groups[table.rollout[0].name]  # gloo already: no second group


@pytest.mark.slow
def test_a_fence_group_for_every_multi_rank_inference_slot(tmp_path: Path) -> None:
    spawn(_groups, 2, str(tmp_path))
    names = json.loads((tmp_path / "rank0.json").read_text())
    assert [n for n in names if n.endswith("/fence")] == ["rollout0/fence"]


def test_an_embedded_replica_captures_its_graphs_after_it_shifts_up(tmp_path: Path) -> None:
    make_model(tmp_path)
    state = load_state_dict(tmp_path)

    def read(buffers: dict) -> tuple[dict, int]:
        for name, t in buffers.items():
            t.copy_(state[name])
        return {}, 3

    engine = EngineConfig(kv_capacity_tokens=256, block_size=4, decode_graphs="eager")
    role = InferenceRole(
        role="rollout",
        model_path=tmp_path,
        engine_cfg=engine,
        model_cfg=ModelConfig(),
        device="cpu",
        seed=0,
    )
    version, phases = role.shift_up(0, None, read)
    graphs = role.engine.runner.graphs
    assert version == 3 and graphs.captures == 0 and phases["graphs"] == 0.0  # off the Read
    for i in range(3):
        role.add([Request(i, [5, 6, 7 + i], SamplingParams(temperature=0, max_new_tokens=4))])
    while role.engine.has_work():
        role.engine.step()
    reached = graphs.captures
    assert reached == len(graphs.graphs) > 0 and graphs.capture_s > 0  # in the first steps
    role.shift_down()
    _, phases = role.shift_up(0, None, read)  # a resume: nothing yet, again
    assert graphs.captures == reached and not graphs.graphs and phases["graphs"] == 0.0
