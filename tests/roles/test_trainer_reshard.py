"""A trainer checkpoint restored by a different number of training ranks (the pool is re-sized at
run time): 2 -> 1, 2 -> 3 (uneven shards), 1 -> 2, bit-exact parameters and AdamW moments, and a
missing old rank file named."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from trainer_harness import spawn, tiny_model

from pivot.config import TrainConfig
from pivot.rl.batch import TrainBatch
from pivot.roles.trainer import Trainer

VOCAB = 37
EXTRA = {"cursor": {"epoch": 3}}


def batch(seed: int, n: int = 4) -> TrainBatch:
    rng = random.Random(seed)
    prompts = [[rng.randrange(VOCAB) for _ in range(rng.randint(2, 4))] for _ in range(n)]
    responses = [[rng.randrange(VOCAB) for _ in range(rng.randint(1, 4))] for _ in range(n)]
    advantages = [rng.uniform(-1.5, 1.5) for _ in range(n)]
    return TrainBatch(prompts, responses, advantages)


def trainer(group: dist.ProcessGroup, seed: int) -> Trainer:
    return Trainer(tiny_model(seed=seed, vocab=VOCAB), group, TrainConfig(lr=1e-2))


def full_state(t: Trainer) -> dict[str, torch.Tensor]:
    """Every parameter and both AdamW moments gathered to full tensors (collective): the
    oracle is the live state, independent of the files the checkpoint wrote."""
    out = {}
    for name, p in t.params.items():
        out[f"param/{name}"] = p.full_tensor().detach().cpu()
        state = t.optimizer.state.get(p, {})
        for key in ("exp_avg", "exp_avg_sq"):
            if key in state:
                out[f"{key}/{name}"] = state[key].full_tensor().cpu()
        if "step" in state:
            out[f"step/{name}"] = torch.as_tensor(state["step"]).float().cpu()
    return out


def _train_and_save(rank: int, world: int, group: dist.ProcessGroup, tmp: str) -> None:
    t = trainer(group, seed=0)
    t.train_step(batch(0))
    t.train_step(batch(1))  # two steps: both moments non-trivial
    t.save(Path(tmp) / "ckpt", extra=EXTRA)
    state = full_state(t)
    if rank == 0:
        torch.save(state, Path(tmp) / "expected.pt")


def _load_and_compare(rank: int, world: int, group: dist.ProcessGroup, tmp: str) -> None:
    t = trainer(group, seed=5)  # other weights and no optimizer state yet: all must come from disk
    assert t.load(Path(tmp) / "ckpt") == EXTRA and t.version == 2
    expected = torch.load(Path(tmp) / "expected.pt")
    got = full_state(t)
    assert got.keys() == expected.keys()
    assert any(k.startswith("exp_avg_sq/") for k in got)
    for key, value in expected.items():
        assert torch.equal(got[key], value), key
    if world == 3:  # the point of 3: shards of uneven length on this rank count
        assert any(p.shape[0] % 3 for p in t.params.values())
    assert not t.train_step(batch(2)).skipped  # the restored optimizer steps on


def saved(tmp: Path, world: int) -> str:
    spawn(_train_and_save, world, str(tmp))
    return str(tmp)


@pytest.fixture(scope="module")
def by_two(tmp_path_factory: pytest.TempPathFactory) -> str:
    return saved(tmp_path_factory.mktemp("by_two"), 2)


@pytest.mark.slow
def test_two_ranks_restore_on_one(by_two: str) -> None:
    spawn(_load_and_compare, 1, by_two)


@pytest.mark.slow
def test_two_ranks_restore_on_three_uneven_shards(by_two: str) -> None:
    spawn(_load_and_compare, 3, by_two)


@pytest.mark.slow
def test_one_rank_restores_on_two(tmp_path: Path) -> None:
    spawn(_load_and_compare, 2, saved(tmp_path, 1))


def _missing_old_rank(rank: int, world: int, group: dist.ProcessGroup, ckpt: str) -> None:
    t = trainer(group, seed=5)
    before = t.full_state_dict()
    with pytest.raises(FileNotFoundError, match="missing rank00001-of-00002.safetensors"):
        t.load(ckpt)
    after = t.full_state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # nothing half-restored


@pytest.mark.slow
def test_missing_old_rank_file_is_named(by_two: str, tmp_path: Path) -> None:
    for name in ("trainer.json", "rank00000-of-00002.safetensors"):  # rank 1's file left out
        (tmp_path / name).write_bytes((Path(by_two) / "ckpt" / name).read_bytes())
    spawn(_missing_old_rank, 1, str(tmp_path))
