"""The emulated flow's GenRM prompts hold every token of the drawn response, as the simulator's
judge prompt does: the EOS tokens a policy writes while EOS is ignored are read, not dropped.
Oracle: the response's own token ids, found verbatim in the judge's prompt."""

from __future__ import annotations

from pathlib import Path

import pytest

from pivot.config import DataConfig, PivotConfig, RewardConfig
from pivot.emulate import EmulatedLengths
from pivot.engine import Output
from pivot.model import TextTokenizer
from pivot.rl.buffer import SampleBuffer
from pivot.rl.data import PromptCursor
from pivot.runtime.flow.rl_flow import RLFlow
from pivot.sim.workload import Workload
from pivot.tiny.task import judge_template, training_set
from tests.model.test_tokenizer import QWEN3_TEMPLATE, _write_folder

pytest.importorskip("transformers")


def _contains(seq: list[int], part: list[int]) -> bool:
    return any(seq[i : i + len(part)] == part for i in range(len(seq) - len(part) + 1))


@pytest.mark.parametrize("emulated", [True, False])
def test_the_judge_reads_the_eos_tokens_written_inside_the_drawn_length(
    tmp_path: Path, emulated: bool
) -> None:
    _write_folder(tmp_path, QWEN3_TEMPLATE, None)
    tok = TextTokenizer.from_pretrained(tmp_path)
    cfg = PivotConfig(data=DataConfig(synthetic_size=8), reward=RewardConfig(chat_template=False))
    parts = (
        cfg,
        PromptCursor(training_set(cfg.data)),
        tok,
        tok,
        SampleBuffer(2, 1),
        1,
        judge_template(cfg.reward),
    )
    workload = Workload(prompts_per_step=cfg.train.batch_prompts, group_size=cfg.train.group_size)
    shaper = EmulatedLengths(tok, workload=workload) if emulated else None
    flow = RLFlow(*parts, shaper=shaper)
    rollout = flow.fill(version=0, total_steps=1)[0]
    eos = tok.encode("<|im_end|>")
    response = tok.encode("Answer: 4") + eos + tok.encode("fox") + eos * 2
    out = Output(
        rollout.seq_id, rollout.request.prompt_ids, response, [0.0] * len(response), "length", 0
    )
    (judge,) = flow.on_rollout(out)
    assert _contains(judge.request.prompt_ids, response) == emulated
    assert _contains(judge.request.prompt_ids, tok.encode("Answer: 4"))
