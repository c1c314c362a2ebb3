"""FSDP2 trainer on 2 gloo ranks: shift bit-exactness, shards, reference math, activation recompute,
checkpoints, NaN."""

from __future__ import annotations

import copy
import json
import math
import random
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from trainer_harness import spawn, tiny_model

from pivot.config import TrainConfig
from pivot.model import from_pretrained
from pivot.model.tp_plan import fsdp_range
from pivot.rl.algo import LossOptions, LossTokens, ppo_clip_loss
from pivot.rl.batch import TrainBatch
from pivot.roles.trainer import Trainer

VOCAB = 37


def make_batch(seed: int, n: int = 6) -> TrainBatch:
    rng = random.Random(seed)
    prompts = [[rng.randrange(VOCAB) for _ in range(rng.randint(2, 5))] for _ in range(n)]
    responses = [[rng.randrange(VOCAB) for _ in range(rng.randint(1, 6))] for _ in range(n)]
    behaviour = [[-rng.uniform(2.5, 4.5) for _ in r] for r in responses]
    advantages = [rng.uniform(-1.5, 1.5) for _ in range(n)]
    return TrainBatch(prompts, responses, advantages, behaviour)


def config(**kw: object) -> TrainConfig:
    base = {"lr": 1e-2, "micro_batch_tokens": 16, "grad_clip": 1.0}
    return TrainConfig(**{**base, **kw})  # type: ignore[arg-type]


def optim_state(t: Trainer) -> list[torch.Tensor]:
    return [
        v.to_local().clone() if hasattr(v, "to_local") else v.clone()
        for s in t.optimizer.state.values()
        for v in s.values()
    ]


def assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> None:
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), k


def _shift_exact(rank: int, world: int, group: dist.ProcessGroup) -> None:
    plain = Trainer(tiny_model(), group, config())
    shifted = Trainer(tiny_model(), group, config())
    gps = shifted.full_state_dict()  # what a GPS Read would return
    for step in range(4):
        batch = make_batch(step)
        m1, m2 = plain.train_step(batch), shifted.train_step(batch)
        assert m1.loss == m2.loss and m1.grad_norm == m2.grad_norm and not m1.skipped
        gps = shifted.full_state_dict()
        shards = {k: v.clone() for k, v in shifted.policy_shards().items()}
        mode = step % 3
        shifted.shift_down(keep_master=mode == 0)
        with pytest.raises(RuntimeError, match="shifted down"):
            shifted.train_step(batch)
        # the device storage really is gone while shifted down
        assert all(p.to_local().untyped_storage().nbytes() == 0 for p in shifted.params.values())
        shifted.shift_up(None if mode == 0 else gps if mode == 1 else shards)
    assert_same(plain.full_state_dict(), shifted.full_state_dict())
    for a, b in zip(optim_state(plain), optim_state(shifted)):
        assert torch.equal(a, b)
    assert plain.version == shifted.version == 4
    # bad GPS input names the tensor
    shifted.shift_down(keep_master=False)
    with pytest.raises(ValueError, match="shift_up needs params"):
        shifted.shift_up()
    bad = dict(gps)
    bad.pop("model.norm.weight")
    with pytest.raises(ValueError, match="'model.norm.weight' missing"):
        shifted.shift_up(bad)
    bad = {**gps, "model.norm.weight": torch.zeros(3)}
    with pytest.raises(ValueError, match="'model.norm.weight' has shape"):
        shifted.shift_up(bad)


@pytest.mark.slow
def test_shift_between_steps_is_bit_exact() -> None:
    spawn(_shift_exact, 2)


def _shards_and_reference(rank: int, world: int, group: dist.ProcessGroup, family: str) -> None:
    cfg = config(micro_batch_tokens=12)
    model = tiny_model(family=family)
    reference = copy.deepcopy(model)
    trainer = Trainer(model, group, cfg)
    full = trainer.full_state_dict()
    for name, shard in trainer.policy_shards().items():
        start, stop = fsdp_range(full[name].shape[0], rank, world)
        assert torch.equal(shard, full[name][start:stop]), name
    assert "lm_head.weight" not in full  # tied: exported under the embedding only
    # compute_logprobs matches a plain forward
    batch = make_batch(7, n=5)
    lps = trainer.compute_logprobs(batch.prompt_ids, batch.response_ids)
    for p, r, lp in zip(batch.prompt_ids, batch.response_ids, lps):
        logits = reference(torch.tensor([p + r])).log_softmax(-1)[0]
        expect = [logits[len(p) - 1 + j, t].item() for j, t in enumerate(r)]
        assert lp == pytest.approx(expect, abs=1e-5)
    # one step equals the single-process reference: whole-batch token-mean loss, clip, AdamW
    metrics = trainer.train_step(batch)
    assert metrics.micro_batches >= 2  # the budget forced micro-batching
    opt = torch.optim.AdamW(
        reference.parameters(),
        lr=cfg.lr,
        betas=(cfg.beta1, cfg.beta2),
        weight_decay=cfg.weight_decay,
    )
    lp_rows, masks, olds = [], [], []
    width = max(len(r) for r in batch.response_ids)
    for p, r, old in zip(batch.prompt_ids, batch.response_ids, batch.behaviour_logprobs or []):
        logits = reference(torch.tensor([p + r])).log_softmax(-1)[0]
        row = torch.stack([logits[len(p) - 1 + j, t] for j, t in enumerate(r)])
        lp_rows.append(torch.cat([row, torch.zeros(width - len(r))]))
        masks.append(torch.tensor([1.0] * len(r) + [0.0] * (width - len(r))))
        olds.append(torch.tensor(old + [0.0] * (width - len(r))))
    tokens = LossTokens(
        logprobs=torch.stack(lp_rows),
        behaviour_logprobs=torch.stack(olds),
        advantages=torch.tensor(batch.advantages),
        mask=torch.stack(masks),
    )
    options = LossOptions(clip_eps_low=cfg.clip_eps_low, clip_eps_high=cfg.clip_eps_high)
    loss, _ = ppo_clip_loss(tokens, options)
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(reference.parameters(), cfg.grad_clip)
    opt.step()
    assert metrics.loss == pytest.approx(loss.item(), abs=1e-5)
    assert metrics.grad_norm == pytest.approx(norm.item(), rel=1e-4)
    after = trainer.full_state_dict()
    for name, t in reference.state_dict().items():
        if name in after:
            assert torch.allclose(after[name], t, atol=1e-5), name
    if family == "qwen3_moe":  # the router trains too
        assert not torch.equal(
            after["model.layers.0.mlp.gate.weight"], full["model.layers.0.mlp.gate.weight"]
        )


@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen2", "qwen3_moe"])
def test_shards_logprobs_and_step_match_reference(family: str) -> None:
    spawn(_shards_and_reference, 2, family)


def _recompute_matches_plain(rank: int, world: int, group: dist.ProcessGroup) -> None:
    batch = make_batch(7, n=5)
    for family in ("qwen2", "qwen3_moe"):  # layer 0 of the MoE model routes over experts
        plain = Trainer(tiny_model(family=family), group, config(micro_batch_tokens=12))
        ckpt = Trainer(
            tiny_model(family=family),
            group,
            config(micro_batch_tokens=12, activation_checkpointing=True),
        )
        assert ckpt.params.keys() == plain.params.keys()  # HF names survive the checkpointing
        lp1, lp2 = (t.compute_logprobs(batch.prompt_ids, batch.response_ids) for t in (plain, ckpt))
        assert sum(lp2, []) == pytest.approx(sum(lp1, []), abs=1e-6)
        calls: list[str] = []
        for name, t in (("plain", plain), ("ckpt", ckpt)):
            t.model.model.layers[0].mlp.register_forward_pre_hook(
                lambda *_, name=name, calls=calls: calls.append(name)
            )
        m1, m2 = plain.train_step(batch), ckpt.train_step(batch)
        assert m2.micro_batches >= 2 and not m2.skipped
        assert calls.count("ckpt") == 2 * calls.count(
            "plain"
        )  # each layer really ran again in the backward
        assert m2.loss == pytest.approx(m1.loss, abs=1e-6) and m2.grad_norm == pytest.approx(
            m1.grad_norm, abs=1e-6
        )
        # after one AdamW step exp_avg = (1 - beta1) * clipped gradient: the gradients agree
        for a, b in zip(optim_state(plain), optim_state(ckpt)):
            assert torch.allclose(a, b, rtol=0, atol=1e-7), family


@pytest.mark.slow
def test_activation_checkpointing_matches_plain_step() -> None:
    spawn(_recompute_matches_plain, 2)


def _checkpoint_and_nan(rank: int, world: int, group: dist.ProcessGroup, tmp: str) -> None:
    ckpt = Path(tmp) / "ckpt"
    a = Trainer(tiny_model(), group, config(max_bad_steps=2))
    a.train_step(make_batch(0))
    a.save(ckpt, extra={"cursor": {"epoch": 1}})
    a.train_step(make_batch(1))
    b = Trainer(tiny_model(seed=5), group, config())
    assert b.load(ckpt) == {"cursor": {"epoch": 1}} and b.version == 1
    b.train_step(make_batch(1))
    assert_same(a.full_state_dict(), b.full_state_dict())
    # HF export reloads to the same weights, and carries its source folder's side files
    source = Path(tmp) / f"source{rank}"
    source.mkdir()
    (source / "tokenizer_config.json").write_text('{"chat_template": "{{ messages }}"}')
    (source / "generation_config.json").write_text('{"eos_token_id": [1, 2]}')
    a.export_hf(Path(tmp) / "hf", source)
    reloaded = from_pretrained(Path(tmp) / "hf").state_dict()
    for name, t in a.full_state_dict().items():
        assert torch.equal(reloaded[name], t), name
    if rank == 0:
        for name in ("tokenizer_config.json", "generation_config.json"):
            assert (Path(tmp) / "hf" / name).read_text() == (source / name).read_text()
    # NaN: skipped, weights kept, abort after max_bad_steps in a row
    before = a.full_state_dict()
    bad = make_batch(2)
    bad.advantages[0] = math.nan
    m = a.train_step(bad)
    assert (
        m.skipped and a.bad_steps == 1 and a.version == 3
    )  # the version counts steps, a skipped one too
    assert_same(before, a.full_state_dict())
    assert not a.train_step(make_batch(3)).skipped and a.bad_steps == 0
    a.train_step(bad)
    with pytest.raises(RuntimeError, match="2 consecutive"):
        a.train_step(bad)
    dist.barrier(group)
    # broken checkpoints: clear errors
    if rank == 0:
        meta = json.loads((ckpt / "trainer.json").read_text())
        meta["shapes"]["model.norm.weight"] = [3]
        (Path(tmp) / "badshape").mkdir()
        for f in ckpt.iterdir():
            (Path(tmp) / "badshape" / f.name).write_bytes(f.read_bytes())
        (Path(tmp) / "badshape" / "trainer.json").write_text(json.dumps(meta))
        (Path(tmp) / "norank").mkdir()
        (Path(tmp) / "norank" / "trainer.json").write_text((ckpt / "trainer.json").read_text())
    dist.barrier(group)
    with pytest.raises(ValueError, match="'model.norm.weight' has shape"):
        b.load(Path(tmp) / "badshape")
    with pytest.raises(FileNotFoundError, match="rank0000"):
        b.load(Path(tmp) / "norank")
    with pytest.raises(FileNotFoundError, match="trainer.json"):
        b.load(Path(tmp) / "nothing")


@pytest.mark.slow
def test_checkpoint_export_and_nan_skip(tmp_path: Path) -> None:
    spawn(_checkpoint_and_nan, 2, str(tmp_path))


def _bf16_step_and_shift(rank: int, world: int, group: dist.ProcessGroup, device: str) -> None:
    """--model.dtype bfloat16: FSDP2 gathers bf16 parameters for the forward, reduces gradients
    in fp32 into the fp32 master; the loss is the fp32 trainer's within bf16 rounding."""
    trainer = Trainer(tiny_model(), group, config(), device=device, compute_dtype=torch.bfloat16)
    reference = Trainer(tiny_model(), group, config(), device=device)
    seen: list[torch.dtype] = []
    mlp = trainer.model.model.layers[0].mlp
    hook = mlp.register_forward_pre_hook(lambda mod, _: seen.append(next(mod.parameters()).dtype))
    before = {
        k: v.clone() for k, v in trainer.full_state_dict().items()
    }  # one rank: no gather, no copy
    m, ref = trainer.train_step(make_batch(0)), reference.train_step(make_batch(0))
    hook.remove()
    assert seen and set(seen) == {torch.bfloat16}
    assert not m.skipped and math.isfinite(m.loss)
    assert m.loss != ref.loss and abs(m.loss - ref.loss) <= 0.05 * abs(ref.loss) + 1e-3, (
        m.loss,
        ref.loss,
    )
    after = {k: v.clone() for k, v in trainer.full_state_dict().items()}
    assert all(t.dtype == torch.float32 for t in after.values())  # fp32 master
    assert any(not torch.equal(before[k], after[k]) for k in before)
    trainer.shift_down()
    trainer.shift_up()
    assert_same(after, trainer.full_state_dict())
    assert math.isfinite(trainer.train_step(make_batch(1)).loss)


def _cuda_step_and_shift(rank: int, world: int, group: dist.ProcessGroup) -> None:
    _bf16_step_and_shift(rank, world, group, f"cuda:{rank}")
    trainer = Trainer(
        tiny_model(), group, config(), device=f"cuda:{rank}", compute_dtype=torch.bfloat16
    )
    trainer.train_step(make_batch(0))
    free_before = torch.cuda.memory_allocated()
    trainer.shift_down()
    assert torch.cuda.memory_allocated() < free_before


@pytest.mark.slow
def test_bf16_mixed_precision_step_on_cpu() -> None:
    spawn(_bf16_step_and_shift, 1, "cpu")


@pytest.mark.gpu
def test_cuda_bf16_step_and_shift() -> None:
    spawn(_cuda_step_and_shift, 1, backend="nccl")


def _mismatch_every_step(rank: int, world: int, group: dist.ProcessGroup) -> None:
    """The step's mismatch figures, reduced over micro-batches and both ranks, equal the ones
    worked out here from the trainer's own log-probs (computed before the step, same weights)."""
    batch = make_batch(11, n=6)
    # rows 0-2 made by version 0 (the trainer's); rows 3-5 by version -1 up to their second token,
    # then by version 0 over the K/V version -1 computed: stale throughout
    starts = [[(0, 0)]] * 3 + [[(-1, 0), (0, 2)]] * 3
    batch = TrainBatch(
        batch.prompt_ids,
        batch.response_ids,
        batch.advantages,
        batch.behaviour_logprobs,
        version_starts=starts,
    )
    for kw in ({}, {"rollout_is": "token", "rollout_is_threshold": 1.2}):
        trainer = Trainer(tiny_model(), group, config(**kw))
        lp = trainer.compute_logprobs(batch.prompt_ids, batch.response_ids)
        current, stale = [], []
        for i, (row, old) in enumerate(zip(lp, batch.behaviour_logprobs)):
            for a, b in zip(row, old):
                (current if i < 3 else stale).append(a - b)
        got = trainer.train_step(batch).mismatch
        for name, rs in (("current", current), ("stale", stale)):
            assert got[f"mismatch_{name}/abs_mean"] == pytest.approx(
                sum(map(abs, rs)) / len(rs), rel=1e-5
            )
            assert got[f"mismatch_{name}/abs_max"] == pytest.approx(max(map(abs, rs)), rel=1e-5)
            k3 = sum(math.exp(r) - r - 1 for r in rs) / len(rs)
            assert got[f"mismatch_{name}/k3"] == pytest.approx(k3, rel=1e-5)
        whole = [
            sum(a - b for a, b in zip(row, old))
            for row, old in zip(lp[:3], batch.behaviour_logprobs[:3])
        ]
        assert got["mismatch_current/seq_log_ratio"] == pytest.approx(sum(whole) / 3, rel=1e-5)
        truncated = sum(math.exp(r) > 1.2 for r in current + stale) / len(current + stale)
        assert got["rollout_is/truncated_share"] == pytest.approx(truncated if kw else 0.0)


@pytest.mark.slow
def test_every_step_measures_the_rollout_trainer_mismatch() -> None:
    spawn(_mismatch_every_step, 2)
