"""A veRL user's reward functions and datasets, unchanged.

Oracles are veRL's own conventions (volcengine/verl, read at b178a3cd):
- docs/preparation/reward_function.rst: a custom function takes (data_source, solution_str,
  ground_truth, extra_info=None), e.g. `def my_reward_fn(...): return len(solution_str)/100`,
  and is conventionally named `compute_score`;
- verl/workers/reward_manager/naive.py (`NaiveRewardManager.__call__`): it is called with those
  four keywords, `extra_info` defaulting to {} (line 79), and a dict result's "score" is the
  reward (lines 92-96) while every key goes to `reward_extra_info`;
- verl/utils/reward_score/__init__.py `default_compute_score`: routing on `data_source`
  ("openai/gsm8k", "DigitalLearningGmbH/MATH-lighteval", "math_dapo"); math_dapo.py returns
  {"score": 1.0 or -1.0, "acc": bool, "pred": str};
- examples/data_preprocess/gsm8k.py and math_dataset.py: the row layout (`data_source`, chat
  `prompt`, `ability`, `reward_model` {style, ground_truth}, `extra_info` struct); DAPO-Math-17k
  (BytedTsinghua-SIA) has the same columns with data_source "math_dapo", ability "MATH",
  style "rule-lighteval/MATH_v2" and extra_info {"index": <uuid string>}.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from pivot.config import ConfigError, DataConfig, PivotConfig, RewardConfig
from pivot.engine import Output
from pivot.model import TextTokenizer
from pivot.rl.buffer import SampleBuffer
from pivot.rl.data import Prompt, PromptCursor, load_dataset
from pivot.rl.plugins import CheckedVerifier, calling_style, load_verifier
from pivot.runtime.flow.rl_flow import RLFlow
from pivot.runtime.records.metrics import RunLog, read_jsonl
from pivot.tiny.task import judge_template
from tests.model.test_tokenizer import QWEN3_TEMPLATE, _write_folder

GSM8K_INSTRUCTION = (
    'Let\'s think step by step and output the final answer after "####".'  # gsm8k.py
)
MATH_INSTRUCTION = (
    "Let's think step by step and output the final answer within \\boxed{}."  # math_dataset.py
)


def verl_rows() -> list[dict]:
    """One row of each of veRL's preprocessed layouts, as its scripts write them."""
    gsm8k = {
        "data_source": "openai/gsm8k",
        "prompt": [
            {
                "role": "user",
                "content": "Natalia sold 48 clips in April and half as many in May. How many in all? "
                + GSM8K_INSTRUCTION,
            }
        ],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "72"},
        "extra_info": {
            "split": "train",
            "index": 0,
            "answer": "48/2 = 24\n48+24 = 72\n#### 72",
            "question": "Natalia sold 48 clips in April and half as many in May. How many in all?",
        },
    }
    math = {
        "data_source": "DigitalLearningGmbH/MATH-lighteval",
        "prompt": [
            {"role": "user", "content": "What is $\\frac12 + \\frac14$? " + MATH_INSTRUCTION}
        ],
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "\\frac{3}{4}"},
        "extra_info": {"split": "test", "index": 1},
    }
    dapo = {
        "data_source": "math_dapo",
        "prompt": [
            {
                "role": "user",
                "content": "Solve the following math problem step by step. The last line of your "
                "response should be of the form Answer: $Answer (without quotes) where $Answer is the answer to "
                'the problem.\n\nWhat is 6 * 7?\n\nRemember to put your answer on its own line after "Answer:".',
            }
        ],
        "ability": "MATH",
        "reward_model": {"ground_truth": "42", "style": "rule-lighteval/MATH_v2"},
        "extra_info": {"index": "9a9b6eb4-a1cb-49d1-8c1e-62eaf2f74079"},
    }
    return [gsm8k, math, dapo]


# ---- functions written the way veRL's documentation shows ------------------------------------
VERL_FUNCTIONS = '''
import re

def my_reward_fn(data_source, solution_str, ground_truth, extra_info=None):
    return len(solution_str)/100

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """Routes on data_source like default_compute_score; a dict result like math_dapo's."""
    if data_source == "openai/gsm8k":
        found = re.search("#### (\\\\-?[0-9\\\\.\\\\,]+)", solution_str)
        answer = found.group(1).replace(",", "") if found else None
    elif data_source == "math_dapo":
        found = re.findall(r"(?i)Answer\\s*:\\s*([^\\n]+)", solution_str)
        answer = found[-1].strip() if found else None
    else:
        raise NotImplementedError(f"Reward function is not implemented for {data_source=}")
    correct = answer == ground_truth
    return {"score": 1.0 if correct else -1.0, "acc": correct, "pred": answer,
            "split_seen": extra_info.get("split", "none")}

SEEN = []

def records_inputs(data_source, solution_str, ground_truth, extra_info=None):
    SEEN.append((data_source, solution_str, ground_truth, extra_info))
    extra_info["num_turns"] = 1  # veRL's naive manager writes into it too: must not leak into the row
    return 0.5
'''


@pytest.fixture
def user_file(tmp_path: Path) -> Path:
    path = tmp_path / "my_reward.py"
    path.write_text(VERL_FUNCTIONS)
    return path


def test_verl_signature_is_detected_and_pivot_s_still_works(user_file: Path) -> None:
    assert calling_style(load_verifier(f"{user_file}:my_reward_fn")) == "verl"
    assert calling_style(load_verifier(f"{user_file}:compute_score")) == "verl"
    assert calling_style(lambda response, ground_truth: 1.0) == "pivot"
    assert calling_style(lambda **kwargs: 1.0) == "verl"  # veRL calls with keywords only
    docs_fn = CheckedVerifier(load_verifier(f"{user_file}:my_reward_fn"))
    assert docs_fn.check("x" * 50, Prompt(0, "q", "1")).value == 0.5  # len(solution_str)/100


def test_a_function_naming_verl_parameters_it_cannot_take_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "bad.py"
    path.write_text("def f(data_source, solution_str):\n    return 0.0\n")
    with pytest.raises(ConfigError, match="veRL's parameters") as e:
        load_verifier(f"{path}:f")
    assert "\n" not in str(e.value)


def _write(path: Path, rows: list[dict]) -> Path:
    """A parquet file per layout as veRL's scripts write (one dataset per file: their extra_info
    structs differ, e.g. DAPO's index is a string, GSM8K's an int), or all rows in one jsonl."""
    if path.suffix == ".parquet":
        pq.write_table(
            pa.Table.from_pylist(rows), path
        )  # structs and a list of structs, as HF datasets writes them
    else:
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_verl_rows_load_without_flags_parquet_and_jsonl(tmp_path: Path) -> None:
    rows = verl_rows()
    loaded = [
        load_dataset(DataConfig(path=str(_write(tmp_path / f"{i}.parquet", [r])))).prompts[0]
        for i, r in enumerate(rows)
    ]
    mixed = load_dataset(DataConfig(path=str(_write(tmp_path / "all.jsonl", rows))))
    assert mixed.stats.skipped == 0
    for prompts in (loaded, mixed.prompts):
        assert [p.data_source for p in prompts] == [
            "openai/gsm8k",
            "DigitalLearningGmbH/MATH-lighteval",
            "math_dapo",
        ]
        assert [p.ground_truth for p in prompts] == ["72", "\\frac{3}{4}", "42"]
        assert [p.extra_info for p in prompts] == [r["extra_info"] for r in rows]
        assert [p.messages for p in prompts] == [r["prompt"] for r in rows]
        assert (
            prompts[0].text == rows[0]["prompt"][0]["content"]
        )  # the text form: a lone user message verbatim


def test_extra_info_is_kept_as_json(tmp_path: Path) -> None:
    import datetime

    row = {**verl_rows()[2], "extra_info": {"index": "a", "when": datetime.datetime(2025, 3, 1)}}
    prompt = load_dataset(DataConfig(path=str(_write(tmp_path / "t.parquet", [row])))).prompts[0]
    assert prompt.extra_info == {
        "index": "a",
        "when": "2025-03-01 00:00:00",
    }  # checkpointed as JSON
    assert load_dataset(
        DataConfig(path=str(_write(tmp_path / "n.jsonl", [{"prompt": "q", "ground_truth": "1"}])))
    ).prompts[0] == Prompt(0, "q", "1")  # a row without them: "" and None


def test_verl_function_receives_each_rows_data_source_and_extra_info(
    tmp_path: Path, user_file: Path
) -> None:
    prompts = load_dataset(
        DataConfig(path=str(_write(tmp_path / "train.jsonl", verl_rows())))
    ).prompts
    fn = load_verifier(f"{user_file}:records_inputs")
    check = CheckedVerifier(fn)
    for p in prompts:
        assert check.check("resp", p).value == 0.5
    seen = fn.__globals__["SEEN"]
    assert [s[0] for s in seen] == [p.data_source for p in prompts]
    assert [s[2] for s in seen] == ["72", "\\frac{3}{4}", "42"] and all(
        s[1] == "resp" for s in seen
    )
    assert seen[2][3]["index"] == "9a9b6eb4-a1cb-49d1-8c1e-62eaf2f74079"
    assert all("num_turns" not in (p.extra_info or {}) for p in prompts)  # the function got a copy
    check.check("resp", Prompt(0, "q", "1"))  # a row without either: "" and {} (naive.py line 79)
    assert seen[-1][0] == "" and seen[-1][3] == {"num_turns": 1}


def test_dict_result_score_is_the_reward_other_keys_are_extras(user_file: Path) -> None:
    check = CheckedVerifier(load_verifier(f"{user_file}:compute_score"))
    row = Prompt(0, "q", "72", data_source="openai/gsm8k", extra_info={"split": "train"})
    right = check.check("so 48+24 = 72\n#### 72", row)
    assert right.value == 1.0 and right.extras == {"acc": True, "pred": "72", "split_seen": "train"}
    wrong = check.check("#### 70", row)
    assert wrong.value == -1.0 and wrong.extras["acc"] is False
    assert (
        check("Answer: 42", "42") == 0.0 and check.errors == 1
    )  # no data_source: its NotImplementedError is counted
    assert (right.accuracy, wrong.accuracy) == (1.0, 0.0)  # "acc" over the -1/+1 score
    assert (
        check.check("Answer: 42", Prompt(0, "q", "42", data_source="math_dapo")).extras["pred"]
        == "42"
    )
    no_score = CheckedVerifier(lambda response, ground_truth: {"acc": 1.0})
    assert no_score.check("r", row).value == 0.0 and "without 'score'" in no_score.first_error


def _flow(tmp_path: Path, spec: str) -> RLFlow:
    folder = tmp_path / "tok"
    folder.mkdir()
    _write_folder(folder, QWEN3_TEMPLATE, None)
    tok = TextTokenizer.from_pretrained(folder)
    data = _write(tmp_path / "train.jsonl", verl_rows())
    cfg = PivotConfig(
        data=DataConfig(path=str(data)), reward=RewardConfig(verifier=spec, w_genrm=0.0)
    )
    cfg.train.batch_prompts, cfg.train.group_size = 3, 2
    cfg.rollout.max_prompt_tokens = (
        1024  # the real instructions are long; the tiny test vocabulary makes them longer
    )
    return RLFlow(
        cfg,
        PromptCursor(load_dataset(cfg.data), shuffle=False),
        tok,
        tok,
        SampleBuffer(2, 1),
        1,
        judge_template(cfg.reward),
    )


def test_dict_extras_reach_metrics_and_samples(tmp_path: Path, user_file: Path) -> None:
    flow = _flow(tmp_path, f"{user_file}:compute_score")
    seqs = flow.fill(version=0, total_steps=1)
    assert len(seqs) == 6
    # the chat prompt went through the policy's chat template (it has one): veRL's rule
    first = flow.buffer.sample(seqs[0].key).prompt
    assert flow.policy_ids(first) == flow.policy_tok.apply_chat_template(
        first.messages, add_generation_prompt=True
    )
    replies = {
        "openai/gsm8k": ["#### 72", "#### 71"],
        "DigitalLearningGmbH/MATH-lighteval": ["\\boxed{3/4}"] * 2,
        "math_dapo": ["Answer: 42", "Answer: 42"],
    }
    for seq in seqs:
        prompt = flow.buffer.sample(seq.key).prompt
        ids = flow.policy_tok.encode(replies[prompt.data_source][seq.key[2]])
        flow.on_output(Output(seq.seq_id, seq.request.prompt_ids, ids, [0.0] * len(ids), "stop", 0))
    _, summary, records = flow.batch(0)
    # gsm8k: one right, one wrong; MATH: not routed by this function (raises, counted, 0.0, no extras); dapo: both right
    assert [r["reward"] for r in records] == [1.0, -1.0, 0.0, 0.0, 1.0, 1.0]
    assert summary["reward_extra/acc"] == pytest.approx(
        3 / 4
    )  # over the 4 samples that reported it
    assert summary["reward/mean"] == pytest.approx(2 / 6)
    assert summary["reward/accuracy"] == pytest.approx(
        3 / 6
    )  # "acc" where given (veRL's core metric), else the score
    assert (
        "reward_extra/pred" not in summary and "reward_extra/split_seen" not in summary
    )  # strings: samples only
    assert records[0]["reward_extra"] == {"acc": True, "pred": "72", "split_seen": "train"}
    assert "reward_extra" not in records[2] and flow.metrics()["count/verifier_errors"] == 2
    log = RunLog(tmp_path / "run", tensorboard=False)
    log.step(0, {**summary, **flow.metrics()})
    log.samples(records)
    log.close()
    row = read_jsonl(tmp_path / "run" / "metrics.jsonl")[0]
    assert row["reward_extra/acc"] == pytest.approx(0.75)
    assert read_jsonl(tmp_path / "run" / "samples.jsonl")[5]["reward_extra"]["pred"] == "42"


def test_math_verify_by_name_in_the_flow(tmp_path: Path) -> None:
    flow = _flow(tmp_path, "math_verify")
    seq = flow.fill(version=0, total_steps=1)[2]  # the MATH row, truth \frac{3}{4}
    assert flow.buffer.sample(seq.key).prompt.data_source == "DigitalLearningGmbH/MATH-lighteval"
    ids = flow.policy_tok.encode("so it is \\boxed{0.75}")
    flow.on_output(Output(seq.seq_id, seq.request.prompt_ids, ids, [0.0] * len(ids), "stop", 0))
    assert flow.verifiable[seq.key] == 1.0 and flow.verify.style == "pivot"


def test_heldout_accuracy_counts_acc_not_the_minus_one_score(
    tmp_path: Path, user_file: Path
) -> None:
    flow = _flow(tmp_path, f"{user_file}:compute_score")
    flow.heldout = [p for p in flow.cursor.dataset.prompts if p.data_source == "math_dapo"] * 2
    seqs = flow.start_eval(0)
    for seq, reply in zip(seqs, ["Answer: 42", "Answer: 41"]):  # one right (+1), one wrong (-1)
        ids = flow.policy_tok.encode(reply)
        flow.on_output(Output(seq.seq_id, seq.request.prompt_ids, ids, [0.0] * len(ids), "stop", 0))
    (result,) = flow.eval_results
    assert result.scores == [1.0, 0.0] and result.accuracy == 0.5  # the mean score would say 0.0


def test_kl_loss_estimators_are_verls() -> None:
    """veRL's `kl_penalty_forward` (verl/trainer/ppo/core_algos.py), the KL loss of
    `actor.use_kl_loss` with `kl_loss_type` "kl" (k1: logprob - ref_logprob) and "low_var_kl"
    (k3: kl = clamp(ref_logprob - logprob, -20, 20); clamp(exp(kl) - kl - 1, -10, 10)), written
    here from that source, against Pivot's estimators on values that reach both clamps."""
    import torch

    from pivot.rl.algo import KL_ESTIMATORS, kl_estimate

    torch.manual_seed(0)
    logprob = torch.randn(4, 64) * 6 - 3
    ref = torch.randn(4, 64) * 6 - 3
    ref[0, :3] = torch.tensor([40.0, -40.0, 3.0])  # beyond the log-ratio clamp, and k3 > 10
    kl = (ref - logprob).clamp(min=-20, max=20)
    verl = {"kl": logprob - ref, "low_var_kl": (torch.exp(kl) - kl - 1).clamp(min=-10, max=10)}
    assert set(KL_ESTIMATORS) == set(verl)
    for name, want in verl.items():
        assert torch.allclose(kl_estimate(logprob, ref, name), want), name
