"""Builds the tiny tools policy (`--preset tiny-tools`) from the shipped tiny policy: a short
supervised warm-up on the multi-turn task (`pivot.tiny.tools_task`): `tool_share` of the
problems as both turns of a tool-using episode (the call, then the answer read off the tool's
response), the others as the policy's own sampled solutions (right or wrong).

Its own samples, not worked solutions: training on right ones lifted its column work on 2-digit
problems from 29% to 84% and left RL nothing to learn. The share is above the calls' share
wanted at the start: a batch's loss is a mean over tokens, so the first token of a 70-token call
weighs half what a 35-token solution's does (a 30% share called on 2% of samples).

The GenRM is the shipped tiny GenRM taught to judge transcripts: judge examples whose responses
are tool-using episodes (right, with a mis-copied expression, with a mis-copied answer, with a
call the calculator refused) beside the column-work examples it learnt on. Untaught, it judged
a right transcript right on 16% of them where the answers were right on 36%: it read the call's
digits as the question's, so RL learnt to stop calling the tool.

The result ships in `pivot/tiny/weights_tools/` (policy/, genrm/) with its manifest (recipe, held-out
figures, checksums), beside the shipped tokenizer and a tokenizer_config.json holding the chat
template and the special tokens, as a hub folder has them; `tools/make_tiny_models.py --tools`
runs this build. One torch thread, seeded: deterministic on one CPU and torch build.
"""

from __future__ import annotations

import dataclasses
import json
import platform
import random
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch

from pivot.model.hf_folder import from_pretrained, save_pretrained
from pivot.model.tokenizer import TextTokenizer
from pivot.model.transformer import CausalLM
from pivot.rl.reward import parse_verdict, verify
from pivot.tiny import synthetic as syn
from pivot.tiny import tools_task as task
from pivot.tiny.build import train_lm
from pivot.tiny.decode import generate
from pivot.tiny.recipe import TinyRecipe
from pivot.tiny.shipped import MANIFEST, WEIGHTS, folder_checksums
from pivot.tools.calculator import evaluate_expression

TOOLS_WEIGHTS = Path(__file__).resolve().parent / "weights_tools"


@dataclasses.dataclass(frozen=True)
class ToolsRecipe:
    problems: int = 4000
    min_digits: int = 2  # the tiny-tools preset's problems (both operands 2 digits)
    max_digits: int = 2
    tool_share: float = 0.45
    """Share of warm-up problems that call the calculator: the policy then calls it on a minority
    of its samples, and greedy decoding (the held-out evaluation) not at all."""
    steps: int = 600
    warmup: int = 30
    lr: float = 1e-3
    genrm_steps: int = 600
    genrm_transcripts: float = 0.5
    """Share of the GenRM's examples that are transcripts (the rest: column work, as it learnt)."""
    batch_size: int = 32
    eval_problems: int = 200
    threads: int = 1


Example = tuple[list[int], list[int]]  # (prompt ids, target ids)


def warmup_examples(
    model: CausalLM,
    tok: TextTokenizer,
    problems: list[syn.Problem],
    tool_share: float,
    seed: int,
) -> list[Example]:
    """`tool_share` of the problems as both turns of their tool-using episode, the second's prompt
    holding the first turn and the tool's response exactly as the runtime builds it; the others
    with `model`'s own sampled solution."""
    rng = random.Random(seed)
    calls = [rng.random() < tool_share for _ in problems]
    own = [p for p, c in zip(problems, calls) if not c]
    prompts = [tok.encode(syn.policy_prompt(p)) for p in own]
    sampled = iter(generate(model, prompts, 96, tok.eos_id, 1.0, seed))
    out = []
    for p, call in zip(problems, calls):
        prompt = tok.encode(syn.policy_prompt(p))
        if not call:
            out.append((prompt, next(sampled) + [tok.eos_id]))
            continue
        turn = tok.encode(task.tool_call_text(p)) + [tok.eos_id]
        reply = tok.encode(task.tool_reply_text(p.answer))
        out.append((prompt, turn))
        out.append((prompt + turn + reply, tok.encode(task.answer_text(p.answer)) + [tok.eos_id]))
    return out


def transcript(p: syn.Problem, rng: random.Random) -> str:
    """A tool-using episode's text as the judge reads it (EOS tokens dropped): right, or with one
    of the policy's slips (a mis-copied operand or answer, an expression the calculator refuses)."""
    kind = rng.choice(("right", "right", "operand", "answer", "refused"))
    expr = task.expression(p)
    if kind == "operand":  # one digit of the second operand, as the policy mis-copies it
        pos = rng.randrange(len(str(p.a)) + 1, len(expr))
        expr = expr[:pos] + str((int(expr[pos]) + rng.randint(1, 9)) % 10) + expr[pos + 1 :]
    elif kind == "refused":
        expr = expr.replace(p.op, p.op + "c", 1)
    result = evaluate_expression(expr)
    answer = result if result.lstrip("-").isdigit() else str(rng.randrange(200))
    if kind == "answer":
        answer = str(abs(int(answer) + rng.choice((-10, -1, 1, 10))))
    return task.call_text(expr) + task.tool_reply_text(result) + task.answer_text(answer)


def judge_examples(
    tok: TextTokenizer, problems: list[syn.Problem], share: float, seed: int
) -> list[Example]:
    """The GenRM's examples: `share` of the problems with a transcript, the others with column
    work (right, a random wrong answer or a plausible slip, as the tiny GenRM learnt on)."""
    rng = random.Random(seed)
    out = []
    for p in problems:
        if rng.random() < share:
            response = transcript(p, rng)
        else:
            draw = rng.random()
            response = (
                syn.worked_solution(p)
                if draw < 0.2
                else syn.wrong_answer_solution(p, rng)
                if draw < 0.5
                else syn.wrong_solution(p, rng)
            )
        prompt = syn.judge_prompt(syn.policy_prompt(p), response)
        target = syn.judge_reasoning(p.question, response)
        out.append((tok.encode(prompt), tok.encode(target) + [tok.eos_id]))
    return out


def judge_agreement(
    model: CausalLM, tok: TextTokenizer, problems: list[syn.Problem], responses: list[str]
) -> float:
    """Share of greedy verdicts (score >= 0.5) that match the responses' true correctness."""
    prompts = [
        tok.encode(syn.judge_prompt(syn.policy_prompt(p), r)) for p, r in zip(problems, responses)
    ]
    verdicts = [parse_verdict(tok.decode(ids)) for ids in generate(model, prompts, 128, tok.eos_id)]
    agree = [
        (v is not None and v >= 0.5) == (verify(r, p.answer) == 1.0)
        for v, r, p in zip(verdicts, responses, problems)
    ]
    return round(sum(agree) / len(agree), 4)


def solve_with_tool(
    model: CausalLM,
    tok: TextTokenizer,
    problems: list[syn.Problem],
    temperature: float,
    seed: int,
) -> tuple[list[str], list[bool]]:
    """Each problem's whole episode text and whether it called the calculator: turn 1, then, for
    a well-formed call, the calculator's response and turn 2."""
    prompts = [tok.encode(syn.policy_prompt(p)) for p in problems]
    first = generate(model, prompts, 96, tok.eos_id, temperature, seed)
    texts = [tok.decode(ids) for ids in first]
    called = [t.startswith("<tool_call>") for t in texts]
    again, where = [], []
    for i, (ids, text) in enumerate(zip(first, texts)):
        if called[i]:
            expr = text.partition('"expr": "')[2].partition('"')[0]
            reply = task.tool_reply_text(evaluate_expression(expr))
            texts[i] += reply
            again.append(prompts[i] + ids + [tok.eos_id] + tok.encode(reply))
            where.append(i)
    if again:
        for i, ids in zip(where, generate(model, again, 16, tok.eos_id, temperature, seed + 1)):
            texts[i] += tok.decode(ids)
    return texts, called


def build_tools_policy(
    out: Path, seed: int = 0, recipe: ToolsRecipe | None = None, log: Callable[[str], None] = print
) -> dict:
    """Warm the shipped tiny policy and GenRM up on the tool task into the new folder `out`
    (policy/, genrm/ and the manifest); returns the manifest."""
    recipe = recipe or ToolsRecipe()
    start = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(recipe.threads)
    try:
        tok = TextTokenizer.from_pretrained(WEIGHTS / "policy")
        problems = syn.generate_problems(
            recipe.problems, seed, recipe.min_digits, recipe.max_digits
        )
        seen = {p.question for p in problems}
        fresh = syn.generate_problems(
            recipe.eval_problems * 4, seed + 1_000_003, recipe.min_digits, recipe.max_digits
        )
        held = [p for p in fresh if p.question not in seen][: recipe.eval_problems]
        torch.manual_seed(seed)
        model = from_pretrained(WEIGHTS / "policy")
        lm = TinyRecipe(lr=recipe.lr, batch_size=recipe.batch_size)
        examples = warmup_examples(model, tok, problems, recipe.tool_share, seed)
        train_lm(
            model, examples, recipe.steps, lm, tok.pad_id, seed, log, "tools policy", recipe.warmup
        )
        folder = out / "policy"
        save_pretrained(model, folder, tokenizer_file=WEIGHTS / "tokenizer.json")
        (folder / "tokenizer_config.json").write_text(
            json.dumps(
                {
                    "eos_token": "<|endoftext|>",
                    "pad_token": "<|pad|>",
                    "chat_template": task.CHAT_TEMPLATE,
                },
                indent=2,
            )
        )
        (folder / "generation_config.json").write_text(
            json.dumps(
                {"eos_token_id": tok.eos_id, "pad_token_id": tok.pad_id, "do_sample": True},
                indent=2,
            )
        )
        metrics = {}
        for name, temperature in (("greedy", 0.0), ("sampled", 1.0)):
            texts, called = solve_with_tool(model, tok, held, temperature, seed + 7)
            right = [verify(t, p.answer) == 1.0 for t, p in zip(texts, held)]
            metrics[f"{name}_accuracy"] = round(sum(right) / len(held), 4)
            metrics[f"{name}_tool_calls"] = round(sum(called) / len(held), 4)
            metrics[f"{name}_accuracy_when_called"] = round(
                sum(r for r, c in zip(right, called) if c) / max(1, sum(called)), 4
            )
        sampled_texts = texts  # the last loop's: sampled at temperature 1
        judge = from_pretrained(WEIGHTS / "genrm")
        judge_problems = syn.generate_problems(
            recipe.problems, seed + 2, recipe.min_digits, recipe.max_digits
        )
        train_lm(
            judge,
            judge_examples(tok, judge_problems, recipe.genrm_transcripts, seed + 3),
            recipe.genrm_steps,
            lm,
            tok.pad_id,
            seed + 3,
            log,
            "tools GenRM",
            recipe.warmup,
        )
        save_pretrained(judge, out / "genrm", tokenizer_file=WEIGHTS / "tokenizer.json")
        (out / "genrm" / "generation_config.json").write_text(
            (folder / "generation_config.json").read_text()
        )
        rng = random.Random(seed + 4)
        metrics["genrm_agreement_transcripts"] = judge_agreement(
            judge, tok, held, [transcript(p, rng) for p in held]
        )
        metrics["genrm_agreement_columns"] = judge_agreement(
            judge,
            tok,
            held,
            [
                syn.wrong_solution(p, rng) if i % 2 else syn.worked_solution(p)
                for i, p in enumerate(held)
            ],
        )
        metrics["genrm_agreement_policy_samples"] = judge_agreement(judge, tok, held, sampled_texts)
        metrics["build_seconds"] = round(time.perf_counter() - start, 1)
        log(f"tools policy: {metrics}")
        manifest = {
            "seed": seed,
            "recipe": asdict(recipe),
            "built_from": "pivot/tiny/weights/policy",
            "built_with": {
                "torch": torch.__version__,
                "threads": recipe.threads,
                "machine": platform.machine(),
            },
            "metrics": metrics,
            "files": folder_checksums(out),
        }
        (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        return manifest
    finally:
        torch.set_num_threads(threads)
