"""GRPO on the synthetic task raises the tiny policy's accuracy (engine rollouts, verifiable reward).

One process (a 1-rank gloo group for the trainer's FSDP mesh): rollout with the embedded
engine, reward with `verify`, batch through the sample buffer, a trainer step, then the new
weights go back to the engine. The policy trains on a pool of TRAIN_SIZE problems of two 2-digit numbers;
the asserted accuracy is greedy on that pool, before and after. Held-out accuracy is printed
too but not asserted: a few dozen steps on 32 problems do not generalise (it can even drop).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import torch.distributed as dist
from trainer_harness import spawn

from pivot.config import DataConfig, TrainConfig
from pivot.rl.batch import batch_from_groups
from pivot.rl.buffer import Outcome, SampleBuffer
from pivot.rl.data import Prompt, PromptCursor
from pivot.rl.reward import verify
from pivot.tiny.task import training_set

STEPS = 20
PROMPTS = 8  # B
GROUP = 8  # G
MAX_NEW = 96
DIGITS = (2, 2)  # two 2-digit operands: the tiny policy is mid-way (~29% greedy), room to learn
EVAL = 64
LR = 3e-4
TRAIN_SIZE = 32


def generate(
    engine: object, tok: object, prompts: list[Prompt], group: int, temperature: float, seed: int
) -> list:
    from pivot.engine.sequence import Request, SamplingParams

    ids = {}
    for p, prompt in enumerate(prompts):
        for g in range(group):
            rid = p * group + g
            params = SamplingParams(
                temperature=temperature, max_new_tokens=MAX_NEW, seed=seed * 100_003 + rid
            )
            engine.add(Request(rid, tok.encode(prompt.text), params))  # type: ignore[attr-defined]
            ids[rid] = (p, g)
    outs = {}
    while len(outs) < len(ids):
        for o in engine.step():  # type: ignore[attr-defined]
            outs[o.id] = o
    return [outs[r] for r in sorted(outs)]


def accuracy(engine: object, tok: object, prompts: list[Prompt]) -> float:
    outs = generate(engine, tok, prompts, 1, 0.0, 0)
    return sum(
        verify(tok.decode(o.output_ids), p.ground_truth) for o, p in zip(outs, prompts)
    ) / len(prompts)  # type: ignore[attr-defined]


def _learn(
    rank: int,
    world: int,
    group: dist.ProcessGroup,
    out: str,
    policy: str,
    knobs: dict | None = None,
) -> None:
    globals().update(knobs or {})  # tuning runs override the module constants
    from pivot.engine.config import EngineConfig
    from pivot.engine.engine import Engine
    from pivot.model import TextTokenizer
    from pivot.roles.trainer import Trainer

    tok = TextTokenizer.from_pretrained(policy)
    engine = Engine.from_pretrained(
        policy,
        EngineConfig(kv_capacity_tokens=PROMPTS * GROUP * 160, max_running_seqs=PROMPTS * GROUP),
        tokenizer=tok,
    )
    cfg = TrainConfig(
        lr=LR, micro_batch_tokens=4096, grad_clip=1.0, batch_prompts=PROMPTS, group_size=GROUP
    )
    trainer = Trainer.from_pretrained(policy, group, cfg, temperature=1.0)
    data = DataConfig(synthetic_size=TRAIN_SIZE, min_digits=DIGITS[0], max_digits=DIGITS[1])
    pool = training_set(data, seed=11)
    cursor = PromptCursor(pool, seed=0)
    held_out = training_set(
        DataConfig(synthetic_size=EVAL, min_digits=DIGITS[0], max_digits=DIGITS[1]), seed=999
    ).prompts
    t0 = time.perf_counter()
    before, before_held_out = accuracy(engine, tok, pool.prompts), accuracy(engine, tok, held_out)
    buffer = SampleBuffer(group_size=GROUP, staleness=cfg.staleness)
    train_rewards, kls = [], []
    for step in range(STEPS):
        prompts = cursor.next_batch(PROMPTS)
        keys = buffer.add_prompts(step, prompts)
        outs = generate(engine, tok, prompts, GROUP, 1.0, step + 1)
        for key, o in zip(keys, outs):
            text = tok.decode(o.output_ids)
            assert (
                buffer.on_response(
                    key, o.output_ids, o.output_logprobs, text, o.weights_version, o.prompt_ids
                )
                is Outcome.ACCEPTED
            )
            buffer.on_reward(key, verify(text, buffer.sample(key).prompt.ground_truth))
        groups = buffer.take_batch(step)
        train_rewards.append(sum(s.reward or 0.0 for g in groups for s in g) / (PROMPTS * GROUP))
        metrics = trainer.train_step(batch_from_groups(groups, normalize_std=cfg.normalize_std))
        assert not metrics.skipped
        kls.append(round(metrics.approx_kl, 5))
        engine.load_weights(trainer.full_state_dict(), metrics.version)
    after, after_held_out = accuracy(engine, tok, pool.prompts), accuracy(engine, tok, held_out)
    result = {
        "before": before,
        "after": after,
        "before_held_out": before_held_out,
        "after_held_out": after_held_out,
        "train_reward_first4": sum(train_rewards[:4]) / 4,
        "train_reward_last4": sum(train_rewards[-4:]) / 4,
        "seconds": time.perf_counter() - t0,
        "rewards": [round(r, 3) for r in train_rewards],
        "approx_kl": kls,
    }
    Path(out).write_text(json.dumps(result))


@pytest.mark.slow
def test_grpo_raises_accuracy(tmp_path: Path) -> None:
    pytest.importorskip("pivot.engine.engine")
    tiny = pytest.importorskip("pivot.tiny.shipped").ensure_tiny_models()
    out = tmp_path / "result.json"
    spawn(_learn, 1, str(out), str(tiny.policy))
    result = json.loads(out.read_text())
    print(f"\nlearning test: {result}")
    assert result["after"] >= result["before"] + 0.06, result
    assert result["train_reward_last4"] > result["train_reward_first4"], result
