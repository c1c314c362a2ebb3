"""Builds the embedded default from scratch: a digit-level tokenizer, a tiny Qwen2-family
policy and a tiny GenRM, in Hugging Face layout, with the held-out figures they reach.

The tokenizer is trained on the synthetic corpus (`pivot.tiny.synthetic`); the policy is
supervised on worked solutions at a constant rate and stopped mid-climb (about a quarter of
held-out problems right), so RL has room to improve; the GenRM starts from the same
initialisation, is supervised longer with a decaying rate (its column work must be sounder
than the policy's it judges), then trained on judge examples (mostly random wrong answers,
some plausible slips and right answers, plus its own early samples). The result ships in
`pivot/tiny/weights/` (`pivot.tiny.shipped`); `tools/make_tiny_models.py` runs this build.

Deterministic for a seed on one CPU and torch build: one torch thread (the recipe's), seeded
data, initialisation and sampling. Another CPU may round differently and land elsewhere.
"""

from __future__ import annotations

import json
import platform
import random
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from pivot.model.args import ModelArgs
from pivot.model.hf_folder import save_pretrained
from pivot.model.tokenizer import TextTokenizer
from pivot.model.transformer import CausalLM
from pivot.rl.reward import parse_verdict, verify
from pivot.tiny import synthetic as syn
from pivot.tiny.decode import generate
from pivot.tiny.recipe import TinyRecipe, sft_problems
from pivot.tiny.shipped import MANIFEST, folder_checksums


def train_tokenizer(corpus: list[str]) -> Tokenizer:
    """Byte-level BPE whose pre-tokenizer isolates every digit, space and symbol: numbers stay
    digit-by-digit (what column arithmetic needs) while words such as 'Answer' merge."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\d|[A-Za-z]+|\s|[^\sA-Za-z\d]"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320,
        special_tokens=["<|endoftext|>", "<|pad|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer)
    return tok


def tiny_args(recipe: TinyRecipe, tok: TextTokenizer) -> ModelArgs:
    return ModelArgs(
        family="qwen2",
        vocab_size=tok.vocab_size,
        hidden_size=recipe.hidden_size,
        intermediate_size=recipe.intermediate_size,
        num_hidden_layers=recipe.layers,
        num_attention_heads=recipe.heads,
        num_key_value_heads=recipe.kv_heads,
        head_dim=recipe.hidden_size // recipe.heads,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        eos_token_id=tok.eos_id,
        pad_token_id=tok.pad_id,
    )


def train_lm(
    model: CausalLM,
    examples: list[tuple[list[int], list[int]]],
    steps: int,
    recipe: TinyRecipe,
    pad_id: int,
    seed: int,
    log: Callable[[str], None] = lambda _: None,
    name: str = "model",
    warmup: int = 0,
    decay: bool = True,
) -> None:
    """Next-token loss on each example's target (not its prompt): AdamW, `warmup` steps of warm-up
    (0: a tenth of `steps`), constant, then with `decay` a linear decay over the last fifth.
    `log` hears the loss four times along the way (a build is minutes long)."""
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=recipe.lr, betas=(0.9, 0.98), weight_decay=0.01)
    # batches of similar length waste little compute on padding; their order is shuffled
    ordered = sorted(examples, key=lambda e: (len(e[0]) + len(e[1]), rng.random()))
    batches = [
        ordered[i : i + recipe.batch_size] for i in range(0, len(ordered), recipe.batch_size)
    ]
    warmup = warmup or max(1, steps // 10)
    model.train()
    for step in range(steps):
        # warm-up, constant, then a linear decay over the last fifth (cosine decayed too early)
        lr_scale = min(1.0, (step + 1) / warmup)
        if decay:
            lr_scale = min(lr_scale, max(0.1, 5 * (steps - step) / steps))
        for group in opt.param_groups:
            group["lr"] = recipe.lr * lr_scale
        batch = rng.choice(batches)
        length = max(len(p) + len(t) for p, t in batch)
        ids = torch.full((len(batch), length), pad_id, dtype=torch.long)
        labels = torch.full((len(batch), length), -100, dtype=torch.long)
        for row, (prompt, target) in enumerate(batch):
            ids[row, : len(prompt) + len(target)] = torch.tensor(prompt + target)
            labels[row, len(prompt) - 1 : len(prompt) + len(target) - 1] = torch.tensor(target)
        logits = model(ids)
        loss = F.cross_entropy(
            logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=-100
        )
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if (step + 1) % max(1, steps // 4) == 0:
            log(f"{name}: step {step + 1}/{steps}, loss {loss.item():.3f}")
    model.eval()


# ---------------------------------------------------------------- build and evaluation


def build_tiny_models(
    out: Path,
    seed: int = 0,
    recipe: TinyRecipe | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> dict:
    """Build tokenizer, policy and GenRM into the new folder `out` and write its manifest
    (recipe, build environment, held-out figures, checksums); returns the manifest."""
    recipe = recipe or TinyRecipe()
    start = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(recipe.threads)
    try:
        rng = random.Random(seed)
        train = sft_problems(seed, recipe)
        seen = {p.question for p in train}
        fresh = syn.generate_problems(
            recipe.eval_problems * 4, seed + 1_000_003, max_digits=recipe.max_digits
        )
        held = [p for p in fresh if p.question not in seen][: recipe.eval_problems]

        # judge prompts and verdicts, not the judge's reasoning: a change of its format then
        # leaves the merges, hence the policy, as they were
        corpus = [syn.policy_prompt(p) + syn.worked_solution(p) for p in train[:2000]]
        corpus += [
            _judge_prompt(p, syn.worked_solution(p)) + f"{syn.VERDICT_PREFIX}{p.id % 2}"
            for p in train[:500]
        ]
        out.mkdir(parents=True)
        train_tokenizer(corpus).save(str(out / "tokenizer.json"))
        tok = TextTokenizer.from_pretrained(out)
        solve = [
            (tok.encode(syn.policy_prompt(p)), tok.encode(syn.worked_solution(p)) + [tok.eos_id])
            for p in train
        ]

        torch.manual_seed(seed)
        model = CausalLM(tiny_args(recipe, tok))
        # stopped mid-climb at a constant rate (a decayed rate lands far higher): RL then has room
        train_lm(
            model,
            solve,
            recipe.policy_steps,
            recipe,
            tok.pad_id,
            seed,
            log,
            "policy",
            recipe.policy_warmup,
            decay=False,
        )
        save_pretrained(model, out / "policy", tokenizer_file=out / "tokenizer.json")
        log(f"policy trained ({recipe.policy_steps} steps) at {time.perf_counter() - start:.0f}s")
        greedy = _respond(model, tok, held, 0.0, seed)
        sampled = _respond(model, tok, held, 1.0, seed + 1)
        greedy_right = [verify(r, p.answer) == 1.0 for p, r in zip(held, greedy)]
        is_right = [verify(r, p.answer) == 1.0 for p, r in zip(held, sampled)]

        log(
            f"policy: greedy {_mean(greedy_right)}, sampled {_mean(is_right)} at {time.perf_counter() - start:.0f}s"
        )
        # the GenRM's own line from the same start: a decayed run whose samples are realistic slips,
        # then more worked solutions, since a judge that re-does the columns no better than the
        # policy cannot tell its slips from its answers, then the judge examples
        torch.manual_seed(seed)
        model = CausalLM(tiny_args(recipe, tok))
        train_lm(
            model, solve, recipe.genrm_seed_steps, recipe, tok.pad_id, seed, log, "GenRM start"
        )
        own = train[: recipe.genrm_own_samples]
        cases = list(zip(own, _respond(model, tok, own, 1.0, seed + 2)))
        train_lm(
            model, solve, recipe.genrm_base_steps, recipe, tok.pad_id, seed + 4, log, "GenRM base"
        )
        # then right answers, random wrong answers after right columns, and plausible slips.
        # Candidate digits that mostly differ from the right ones keep the judge from copying them
        # instead of computing (with half right it did, and passed wrong answers); slips, whose
        # column lines are wrong, keep it from copying the candidate's lines instead of working
        # from the question (with 10% slips it did: chance agreement on held-out slips)
        for p in train[recipe.genrm_own_samples :]:
            draw = rng.random()
            if draw < recipe.judge_right:
                cases.append((p, syn.worked_solution(p)))
            elif draw < 1 - recipe.judge_slips:
                cases.append((p, syn.wrong_answer_solution(p, rng)))
            else:
                cases.append((p, syn.wrong_solution(p, rng)))
        judge = []
        for p, r in cases:
            judge.append(
                (
                    tok.encode(_judge_prompt(p, r)),
                    tok.encode(syn.judge_reasoning(p.question, r)) + [tok.eos_id],
                )
            )
        train_lm(model, judge, recipe.genrm_steps, recipe, tok.pad_id, seed + 3, log, "GenRM")
        save_pretrained(model, out / "genrm", tokenizer_file=out / "tokenizer.json")
        log(f"GenRM trained ({recipe.genrm_steps} steps) at {time.perf_counter() - start:.0f}s")

        # balanced held-out judge set: the policy's own sample plus one candidate of the other label
        counterpart = [
            syn.wrong_solution(p, rng) if ok else syn.worked_solution(p)
            for p, ok in zip(held, is_right)
        ]
        judged = _judge(
            model, tok, held + held, sampled + counterpart, is_right + [not ok for ok in is_right]
        )
        n = len(held)
        metrics = {
            "policy_greedy_accuracy": _mean(greedy_right),
            "policy_sampled_accuracy": _mean(is_right),
            "genrm_agreement": _mean(judged),
            "genrm_agreement_on_policy_samples": _mean(judged[:n]),
            "policy_greedy_by_digits": {
                str(d): _mean([ok for p, ok in zip(held, greedy_right) if p.digits == d])
                for d in sorted({p.digits for p in held})
            },
            "build_seconds": round(time.perf_counter() - start, 1),
        }
        for name in ("policy", "genrm"):  # the hub's companion files, as a user's folder has them
            (out / name / "generation_config.json").write_text(
                json.dumps(
                    {
                        "eos_token_id": tok.eos_id,
                        "pad_token_id": tok.pad_id,
                        "do_sample": True,
                        "temperature": 1.0,
                    },
                    indent=2,
                )
            )
        manifest = {
            "seed": seed,
            "recipe": asdict(recipe),
            "built_with": {
                "torch": torch.__version__,
                "threads": recipe.threads,
                "machine": platform.machine(),
                "processor": platform.processor() or "unknown",
            },
            "metrics": metrics,
            "files": folder_checksums(out),
        }
        (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        return manifest
    finally:
        torch.set_num_threads(threads)


def _judge_prompt(p: syn.Problem, response: str) -> str:
    return syn.judge_prompt(syn.policy_prompt(p), response)


def _mean(flags: list[bool]) -> float:
    return round(sum(flags) / max(1, len(flags)), 4)


def _respond(
    model: CausalLM, tok: TextTokenizer, problems: list[syn.Problem], temperature: float, seed: int
) -> list[str]:
    prompts = [tok.encode(syn.policy_prompt(p)) for p in problems]
    return [tok.decode(ids) for ids in generate(model, prompts, 96, tok.eos_id, temperature, seed)]


def _judge(
    model: CausalLM,
    tok: TextTokenizer,
    problems: list[syn.Problem],
    responses: list[str],
    correct: list[bool],
) -> list[bool]:
    """Per case: does the GenRM's greedy verdict (score >= 0.5) match true correctness?"""
    prompts = [tok.encode(_judge_prompt(p, r)) for p, r in zip(problems, responses)]
    texts = [tok.decode(ids) for ids in generate(model, prompts, 128, tok.eos_id)]
    return [
        (score is not None and score >= 0.5) == ok
        for score, ok in zip(map(parse_verdict, texts), correct)
    ]
