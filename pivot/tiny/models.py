"""The embedded default: a tiny arithmetic policy and a tiny GenRM, built on first use and cached.

`ensure_tiny_models()` returns the cached pair or builds it: trains a digit-level tokenizer on
the synthetic corpus (`pivot.tiny.synthetic`), supervised-trains a tiny Qwen2-family policy on
worked solutions, deliberately stopping early so RL has room to improve, then continues from
those weights on judge examples (mostly random wrong answers, some plausible slips and right
answers, plus the policy's own samples) to get the GenRM. Both are saved in Hugging Face layout with the tokenizer and evaluated on held-out
problems. The build goes to a temp folder renamed into place only when complete, so a crashed
build is redone and racing builders never see a half-written cache.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import random
import shutil
import time
import uuid
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from pivot.model.args import ModelArgs
from pivot.model.hf_folder import save_pretrained
from pivot.model.tokenizer import TextTokenizer
from pivot.model.transformer import CausalLM
from pivot.rl.reward import parse_verdict, verify
from pivot.tiny import synthetic as syn

BUILD_VERSION = 5  # bump when the recipe changes so stale caches are not reused
MARKER = "COMPLETE"
DEFAULT_CACHE = Path(__file__).resolve().parents[2] / ".cache" / "tiny"


@dataclasses.dataclass(frozen=True)
class TinyRecipe:
    """Everything the build depends on; its hash names the cache folder."""

    hidden_size: int = 128
    layers: int = 2
    heads: int = 8  # 8 heads of 16 dims, not 4 of 32: reading digits by position needs many heads
    kv_heads: int = 8
    intermediate_size: int = 256
    train_problems: int = 8000
    max_digits: int = 3  # operands of 1..max_digits digits: short ones are learnt, long ones fail
    policy_steps: int = 900  # held-out accuracy climbs steeply: ~6% at 600 steps, ~90% at 1400
    genrm_steps: int = 800
    batch_size: int = 32
    lr: float = 3e-3
    eval_problems: int = 200
    genrm_policy_samples: int = 512


@dataclasses.dataclass
class TinyModels:
    root: Path
    policy: Path
    genrm: Path
    tokenizer: Path
    policy_greedy_accuracy: float
    policy_sampled_accuracy: float
    genrm_agreement: float  # balanced: one correct and one wrong candidate per held-out problem
    genrm_agreement_on_policy_samples: float
    policy_greedy_by_digits: dict[str, float]  # held-out accuracy per column count
    build_seconds: float


def ensure_tiny_models(
    cache_dir: str | Path | None = None,
    seed: int = 0,
    recipe: TinyRecipe | None = None,
    log: Callable[[str], None] | None = None,
) -> TinyModels:
    """The cached tiny policy + GenRM for `seed`, built (about 2-3 minutes on 2 cores) if absent."""
    recipe = recipe or TinyRecipe()
    key = _cache_key(seed, recipe)
    root = cache_root(cache_dir, seed, recipe)
    build_once(root, key, lambda tmp: _build(tmp, seed, recipe, log or (lambda _: None)))
    metrics = json.loads((root / "metrics.json").read_text())
    return TinyModels(root=root, policy=root / "policy", genrm=root / "genrm", tokenizer=root / "tokenizer.json", **metrics)


def sft_problems(seed: int = 0, recipe: TinyRecipe | None = None) -> list[syn.Problem]:
    """The problems the embedded tiny policy (and, from its weights, the GenRM) learnt from."""
    recipe = recipe or TinyRecipe()
    return syn.generate_problems(recipe.train_problems, seed, max_digits=recipe.max_digits)


def build_once(root: Path, key: str, build: Callable[[Path], None]) -> None:
    """Run `build(tmp)` unless `root` is complete; publish by renaming tmp to `root` atomically.
    A crash leaves no `root` (rebuilt next time); when builders race, the first rename wins and
    the others discard their copy."""
    if (root / MARKER).is_file():
        return
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = root.parent / f".tmp-{root.name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        build(tmp)
        (tmp / MARKER).write_text(key)
        if root.exists() and not (root / MARKER).is_file():
            shutil.rmtree(root, ignore_errors=True)  # an incomplete folder not made by this code
        try:
            os.rename(tmp, root)
        except OSError:
            if not (root / MARKER).is_file():  # lost the race only if the winner finished
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _cache_key(seed: int, recipe: TinyRecipe) -> str:
    return json.dumps({"v": BUILD_VERSION, "seed": seed, **dataclasses.asdict(recipe)}, sort_keys=True)


def cache_root(cache_dir: str | Path | None, seed: int, recipe: TinyRecipe) -> Path:
    """The folder a build for (seed, recipe) lives in."""
    return Path(cache_dir or DEFAULT_CACHE) / hashlib.sha256(_cache_key(seed, recipe).encode()).hexdigest()[:16]


# ---------------------------------------------------------------- tokenizer and model


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
    model: CausalLM, examples: list[tuple[list[int], list[int]]], steps: int, recipe: TinyRecipe, pad_id: int, seed: int,
    log: Callable[[str], None] = lambda _: None, name: str = "model",
) -> None:
    """Next-token loss on each example's target (not its prompt): AdamW, warm-up, constant, linear
    decay. `log` hears the loss four times along the way (a first build is minutes long)."""
    rng = random.Random(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=recipe.lr, betas=(0.9, 0.98), weight_decay=0.01)
    # batches of similar length waste little compute on padding; their order is shuffled
    ordered = sorted(examples, key=lambda e: (len(e[0]) + len(e[1]), rng.random()))
    batches = [ordered[i : i + recipe.batch_size] for i in range(0, len(ordered), recipe.batch_size)]
    warmup = max(1, steps // 10)
    model.train()
    for step in range(steps):
        # warm-up, constant, then a linear decay over the last fifth (cosine decayed too early)
        lr_scale = min(1.0, (step + 1) / warmup, max(0.1, 5 * (steps - step) / steps))
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
        loss = F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=-100)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if (step + 1) % max(1, steps // 4) == 0:
            log(f"{name}: step {step + 1}/{steps}, loss {loss.item():.3f}")
    model.eval()


# ---------------------------------------------------------------- decoding (self-contained)


class _KVCache:
    """Attention backend with a dense KV cache and a key-padding mask for left-padded prompts."""

    def __init__(self, layers: int, valid: torch.Tensor) -> None:
        self.k: list[torch.Tensor | None] = [None] * layers
        self.v: list[torch.Tensor | None] = [None] * layers
        self.valid = valid  # [B, S] which cached keys are real tokens

    def __call__(self, layer_idx: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        prev_k, prev_v = self.k[layer_idx], self.v[layer_idx]
        k = k if prev_k is None else torch.cat([prev_k, k], dim=1)
        v = v if prev_v is None else torch.cat([prev_v, v], dim=1)
        self.k[layer_idx], self.v[layer_idx] = k, v
        t, s = q.shape[1], k.shape[1]
        causal = torch.ones(t, s, dtype=torch.bool).tril(diagonal=s - t)
        mask = causal[None] & self.valid[:, None, :s]
        mask = mask | _diag(t, s)[None]  # a pad query sees itself, so no row is fully masked
        rep = q.shape[2] // k.shape[2]
        k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
        out = F.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask[:, None]
        )
        return out.transpose(1, 2)


def _diag(t: int, s: int) -> torch.Tensor:
    return torch.arange(s)[None, :] == (torch.arange(t) + s - t)[:, None]


@torch.no_grad()
def generate(
    model: CausalLM, prompts: list[list[int]], max_new: int, eos_id: int, temperature: float = 0.0, seed: int = 0
) -> list[list[int]]:
    """Greedy (temperature 0) or sampled continuations, each cut at (and without) EOS."""
    gen = torch.Generator().manual_seed(seed)
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])  # pads are masked out
    valid = torch.tensor([[False] * (width - len(p)) + [True] * len(p) for p in prompts])
    pos = (valid.long().cumsum(1) - 1).clamp(min=0)
    cache = _KVCache(model.args.num_hidden_layers, valid)
    logits = model(ids, positions=pos, attn=cache)[:, -1]
    out = [[] for _ in prompts]
    done = torch.zeros(len(prompts), dtype=torch.bool)
    next_pos = pos[:, -1:] + 1
    for _ in range(max_new):
        if temperature > 0:
            token = torch.multinomial(F.softmax(logits.float() / temperature, -1), 1, generator=gen)[:, 0]
        else:
            token = logits.argmax(-1)
        for row in (~done).nonzero()[:, 0].tolist():
            if token[row].item() == eos_id:
                done[row] = True
            else:
                out[row].append(token[row].item())
        if done.all():
            break
        cache.valid = torch.cat([cache.valid, torch.ones(len(prompts), 1, dtype=torch.bool)], dim=1)
        logits = model(token[:, None], positions=next_pos, attn=cache)[:, -1]
        next_pos = next_pos + 1
    return out


# ---------------------------------------------------------------- build and evaluation


def _build(out: Path, seed: int, recipe: TinyRecipe, log: Callable[[str], None]) -> None:
    start = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(int(os.environ.get("PIVOT_TINY_THREADS", "2")))  # results are defined for 2 threads
    try:
        torch.manual_seed(seed)
        rng = random.Random(seed)
        train = sft_problems(seed, recipe)
        seen = {p.question for p in train}
        fresh = syn.generate_problems(recipe.eval_problems * 4, seed + 1_000_003, max_digits=recipe.max_digits)
        held = [p for p in fresh if p.question not in seen][: recipe.eval_problems]

        # judge prompts and verdicts, not the judge's reasoning: a change of its format then
        # leaves the merges, hence the policy, as they were
        corpus = [syn.policy_prompt(p) + syn.worked_solution(p) for p in train[:2000]]
        corpus += [_judge_prompt(p, syn.worked_solution(p)) + f"{syn.VERDICT_PREFIX}{p.id % 2}" for p in train[:500]]
        out.mkdir(parents=True)
        train_tokenizer(corpus).save(str(out / "tokenizer.json"))
        tok = TextTokenizer.from_pretrained(out)
        solve = [(tok.encode(syn.policy_prompt(p)), tok.encode(syn.worked_solution(p)) + [tok.eos_id]) for p in train]

        model = CausalLM(tiny_args(recipe, tok))
        train_lm(model, solve, recipe.policy_steps, recipe, tok.pad_id, seed, log, "policy")
        save_pretrained(model, out / "policy", tokenizer_file=out / "tokenizer.json")
        log(f"policy trained ({recipe.policy_steps} steps) at {time.perf_counter() - start:.0f}s")
        greedy = _respond(model, tok, held, 0.0, seed)
        sampled = _respond(model, tok, held, 1.0, seed + 1)
        greedy_right = [verify(r, p.answer) == 1.0 for p, r in zip(held, greedy)]
        is_right = [verify(r, p.answer) == 1.0 for p, r in zip(held, sampled)]

        log(f"policy: greedy {_mean(greedy_right)}, sampled {_mean(is_right)} at {time.perf_counter() - start:.0f}s")
        # the GenRM continues from the policy's weights: its column work is the policy's
        own = train[: recipe.genrm_policy_samples]
        cases = list(zip(own, _respond(model, tok, own, 1.0, seed + 2)))
        # then 10% right, 80% a random wrong answer, 10% a plausible slip. Candidate digits that
        # mostly differ from the right ones keep the judge from copying them instead of computing
        # (with half right it did, and passed wrong answers); each line still compares a digit,
        # so the many mismatches do not bias the verdict (`syn.wrong_answer_solution`)
        for p in train[recipe.genrm_policy_samples :]:
            draw = rng.random()
            if draw < 0.1:
                cases.append((p, syn.worked_solution(p)))
            else:
                cases.append((p, syn.wrong_answer_solution(p, rng) if draw < 0.9 else syn.wrong_solution(p, rng)))
        judge = []
        for p, r in cases:
            judge.append((tok.encode(_judge_prompt(p, r)), tok.encode(syn.judge_reasoning(p.question, r)) + [tok.eos_id]))
        train_lm(model, judge, recipe.genrm_steps, recipe, tok.pad_id, seed + 3, log, "GenRM")
        save_pretrained(model, out / "genrm", tokenizer_file=out / "tokenizer.json")
        log(f"GenRM trained ({recipe.genrm_steps} steps) at {time.perf_counter() - start:.0f}s")

        # balanced held-out judge set: the policy's own sample plus one candidate of the other label
        counterpart = [syn.wrong_solution(p, rng) if ok else syn.worked_solution(p) for p, ok in zip(held, is_right)]
        judged = _judge(model, tok, held + held, sampled + counterpart, is_right + [not ok for ok in is_right])
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
        (out / "metrics.json").write_text(json.dumps(metrics, indent=2))
    finally:
        torch.set_num_threads(threads)


def _judge_prompt(p: syn.Problem, response: str) -> str:
    return syn.judge_prompt(syn.policy_prompt(p), response)


def _mean(flags: list[bool]) -> float:
    return round(sum(flags) / max(1, len(flags)), 4)


def _respond(model: CausalLM, tok: TextTokenizer, problems: list[syn.Problem], temperature: float, seed: int) -> list[str]:
    prompts = [tok.encode(syn.policy_prompt(p)) for p in problems]
    return [tok.decode(ids) for ids in generate(model, prompts, 96, tok.eos_id, temperature, seed)]


def _judge(
    model: CausalLM, tok: TextTokenizer, problems: list[syn.Problem], responses: list[str], correct: list[bool]
) -> list[bool]:
    """Per case: does the GenRM's greedy verdict (score >= 0.5) match true correctness?"""
    prompts = [tok.encode(_judge_prompt(p, r)) for p, r in zip(problems, responses)]
    texts = [tok.decode(ids) for ids in generate(model, prompts, 128, tok.eos_id)]
    return [(score is not None and score >= 0.5) == ok for score, ok in zip(map(parse_verdict, texts), correct)]
