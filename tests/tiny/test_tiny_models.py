"""Tiny-model plumbing (tokenizer, KV-cache decoding, atomic cache publish) and one slow build."""
from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from pivot.model import CausalLM, TextTokenizer
from pivot.tiny.models import MARKER, TinyRecipe, build_once, ensure_tiny_models, generate, tiny_args, train_tokenizer
from pivot.tiny import synthetic as syn

ROOT = Path(__file__).resolve().parents[2]


def _tokenizer() -> TextTokenizer:
    problems = syn.generate_problems(200, seed=0)
    return TextTokenizer(train_tokenizer([syn.policy_prompt(p) + syn.worked_solution(p) for p in problems]))


def test_tokenizer_round_trips_and_splits_digits() -> None:
    tok = _tokenizer()
    text = syn.judge_prompt("Problem: 4821+377=?", "1+7+0=8 c0\nAnswer: 5198") + "Verdict: 1"
    assert tok.decode(tok.encode(text)) == text
    digits = [tok.tok.id_to_token(i) for i in tok.encode("123456")]
    assert digits == list("123456")
    assert tok.tok.token_to_id("<|pad|>") == tok.pad_id != tok.eos_id


def test_cached_decoding_matches_full_recompute() -> None:
    torch.manual_seed(0)
    tok = _tokenizer()
    model = CausalLM(tiny_args(TinyRecipe(layers=2), tok)).eval()
    prompts = [tok.encode(syn.policy_prompt(p)) for p in syn.generate_problems(3, seed=5)]
    fast = generate(model, prompts, max_new=8, eos_id=-1)
    for prompt, out in zip(prompts, fast):
        ids = list(prompt)
        with torch.no_grad():
            for _ in range(8):
                ids.append(int(model(torch.tensor([ids]))[0, -1].argmax()))
        assert out == ids[len(prompt) :]
    sampled = generate(model, prompts, max_new=8, eos_id=-1, temperature=1.0, seed=3)
    assert sampled == generate(model, prompts, max_new=8, eos_id=-1, temperature=1.0, seed=3)


def test_build_once_publishes_atomically(tmp_path: Path) -> None:
    root = tmp_path / "abc"

    def crash(tmp: Path) -> None:
        tmp.mkdir()
        (tmp / "half").write_text("x")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        build_once(root, "k", crash)
    assert not root.exists() and list(tmp_path.iterdir()) == []  # nothing half-built is left

    calls = []

    def slow(tmp: Path) -> None:
        tmp.mkdir()
        calls.append(tmp)
        (tmp / "data").write_text(str(len(calls)))

    threads = [threading.Thread(target=build_once, args=(root, "k", slow)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (root / MARKER).read_text() == "k" and (root / "data").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["abc"]  # losers cleaned up
    build_once(root, "k", crash)  # complete: not rebuilt


@pytest.mark.slow
def test_default_models_build_and_load_without_transformers() -> None:
    models = ensure_tiny_models()  # the shared cache: built once per machine, reused afterwards
    for folder in (models.policy, models.genrm):
        for name in ("config.json", "model.safetensors", "tokenizer.json"):
            assert (folder / name).is_file()
    assert json.loads((models.policy / "config.json").read_text())["model_type"] == "qwen2"
    # the bands the embedded default promises (deterministic for the seed on a given CPU build)
    assert 0.2 <= models.policy_greedy_accuracy <= 0.5, models
    assert models.genrm_agreement >= 0.75, models
    script = f"""
import sys, torch
from pivot.model import from_pretrained, TextTokenizer
for path in ({str(models.policy)!r}, {str(models.genrm)!r}):
    model, tok = from_pretrained(path), TextTokenizer.from_pretrained(path)
    logits = model(torch.tensor([tok.encode("Problem: 12+34=?\\n")]))
    assert logits.shape[-1] == model.args.vocab_size and torch.isfinite(logits).all()
assert "transformers" not in sys.modules
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
