"""The bfloat16 tier: what users run on GPUs (every role in bf16, thousands of positions), checked
on this CPU (AVX512-BF16), per family with its real rotary settings (tests/numerics/long_models.py).

The oracle is transformers in fp32 over the same tokens; the scale of every tolerance is
transformers' own bf16 error, measured here on the same tokens (transformers loaded with
`dtype=` keeps its rotary table in fp32, so it is a fair bf16 model). Checked:
- the embedded engine's log-probs at positions 4,096-4,119 (chunked prefill, then decode);
- the trainer's forward under FSDP2 mixed precision (bf16 gathered parameters, fp32 master) on
  the tokens the engine made, and the engine against the trainer: the PPO ratio's two sides.
Measured: the engine 0.8-1.0x transformers' error, the trainer 0.8-1.0x. With the engine's rotary
table rounded to bf16 (the defect these tests were written for) the engine's error was 13-14x
transformers' on Qwen2.5 and Qwen3, 7x on GLM-4, 1.9x on Qwen3.5 (partial rotary, theta 1e7).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from pivot.engine import Engine, EngineConfig, Request, SamplingParams
from tests.roles.trainer_harness import spawn

transformers = pytest.importorskip("transformers")
from tests.numerics.long_models import (  # noqa: E402 (needs transformers)
    FAMILIES,
    POSITIONS,
    long_prompt,
    mean_abs,
    reference_logprobs,
    save_long_model,
    transformers_bf16_error,
)

pytestmark = pytest.mark.slow
NEW = 24
BOUND = 1.5  # x transformers' own bf16 error (issue 54's bar)
ENGINE = EngineConfig(
    kv_capacity_tokens=POSITIONS + 64, block_size=16, max_running_seqs=1, max_prefill_tokens=1024
)


class Run:
    """One family: its folder, the engine's tokens and log-probs, and the two references."""

    def __init__(self, root: Path, family: str) -> None:
        self.family, self.path = family, root / family
        hf32 = save_long_model(self.path, family)
        self.prompt = long_prompt(seed=1)
        engine = Engine.from_pretrained(self.path, ENGINE, dtype="bfloat16")
        self.table_dtype = engine.runner.model.model.rotary.inv_freq.dtype
        self.tokens, self.engine_lp = self._generate(engine)
        self.fp32 = reference_logprobs(hf32, self.prompt, self.tokens)
        self.noise = transformers_bf16_error(self.path, family, self.prompt, self.tokens, self.fp32)
        # the flex kernel (a GPU's default), generating on its own; its references are those
        # of its own tokens (the same as above unless a near-tie fell the other way in bf16)
        flex = Engine.from_pretrained(
            self.path, replace(ENGINE, attention="flex"), dtype="bfloat16"
        )
        self.flex_tokens, self.flex_lp = self._generate(flex)
        self.flex_fp32, self.flex_noise = self.fp32, self.noise
        if self.flex_tokens != self.tokens:
            self.flex_fp32 = reference_logprobs(hf32, self.prompt, self.flex_tokens)
            self.flex_noise = transformers_bf16_error(
                self.path, family, self.prompt, self.flex_tokens, self.flex_fp32
            )

    def _generate(self, engine: Engine) -> tuple[list[int], list[float]]:
        engine.add(
            Request(
                0, self.prompt, SamplingParams(temperature=0, max_new_tokens=NEW, ignore_eos=True)
            )
        )
        done = {}
        while engine.has_work():
            done.update({o.id: o for o in engine.step()})
        return done[0].output_ids, done[0].output_logprobs

    def ratio(self, logprobs: list[float]) -> float:
        return mean_abs(logprobs, self.fp32) / self.noise


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("long")
    return {family: Run(root, family) for family in FAMILIES}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_engine_in_bf16_is_within_transformers_own_error_at_4k_positions(
    runs: dict[str, Run], family: str
) -> None:
    run = runs[family]
    assert run.table_dtype == torch.float32  # the rotary table survived the cast to bf16
    assert len(run.tokens) == NEW and run.noise > 0
    ratio = run.ratio(run.engine_lp)
    assert ratio <= BOUND, (
        f"{family}: engine mean |dlogp| {mean_abs(run.engine_lp, run.fp32):.4f} is "
        f"{ratio:.2f}x transformers' own bf16 error {run.noise:.4f}"
    )


@pytest.mark.parametrize("family", list(FAMILIES))
def test_the_flex_kernel_in_bf16_is_within_the_same_bound(
    runs: dict[str, Run], family: str
) -> None:
    """The flex paged kernel: chunked prefill of the 4K-token prompt in 128-query tiles, then
    decode steps over the paged cache, against the same references as the gather path."""
    run = runs[family]
    ratio = mean_abs(run.flex_lp, run.flex_fp32) / run.flex_noise
    assert len(run.flex_tokens) == NEW and ratio <= BOUND, (
        f"{family}: flex mean |dlogp| {mean_abs(run.flex_lp, run.flex_fp32):.4f} is "
        f"{ratio:.2f}x transformers' own bf16 error {run.flex_noise:.4f}"
    )
    print(
        f"{family}: flex {ratio:.2f}x, gather {run.ratio(run.engine_lp):.2f}x transformers' error"
    )


def _trainer_logprobs(rank: int, world: int, group: object, jobs: dict, out: str) -> None:
    from pivot.config import TrainConfig
    from pivot.roles.trainer import Trainer

    got = {}
    for family, (path, prompt, tokens) in jobs.items():
        trainer = Trainer.from_pretrained(
            path,
            group,
            TrainConfig(),
            compute_dtype=torch.bfloat16,  # type: ignore[arg-type]
        )
        table = trainer.model.model.rotary.inv_freq.dtype
        got[family] = {
            "logprobs": trainer.compute_logprobs([prompt], [tokens])[0],
            "table": str(table),
        }
    Path(out).write_text(json.dumps(got))


def test_trainer_under_fsdp2_bf16_agrees_with_transformers_and_with_the_engine(
    runs: dict[str, Run], tmp_path: Path
) -> None:
    """The PPO ratio's two sides on one response: the rollout engine's log-probs and the
    trainer's, both bf16, are as close to each other as each is to fp32 (measured: 0.2-0.8x
    transformers' bf16 error apart)."""
    out = tmp_path / "trainer.json"
    jobs = {f: (str(r.path), r.prompt, r.tokens) for f, r in runs.items()}
    spawn(_trainer_logprobs, 1, jobs, str(out))
    got = json.loads(out.read_text())
    for family, run in runs.items():
        lp = got[family]["logprobs"]
        assert got[family]["table"] == "torch.float32", family
        assert run.ratio(lp) <= BOUND, f"{family}: trainer {run.ratio(lp):.2f}x"
        apart = mean_abs(lp, run.engine_lp) / run.noise
        assert apart <= BOUND, f"{family}: engine vs trainer {apart:.2f}x the bf16 noise"
