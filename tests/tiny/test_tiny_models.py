"""Tiny-model plumbing (tokenizer, KV-cache decoding), the deterministic build and the shipped models."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from pivot.model import CausalLM, TextTokenizer
from pivot.tiny import synthetic as syn
from pivot.tiny.build import build_tiny_models, tiny_args, train_tokenizer
from pivot.tiny.decode import generate
from pivot.tiny.recipe import TinyRecipe
from pivot.tiny.shipped import WEIGHTS, ensure_tiny_models, folder_checksums

ROOT = Path(__file__).resolve().parents[2]


def _tokenizer() -> TextTokenizer:
    problems = syn.generate_problems(200, seed=0)
    return TextTokenizer(
        train_tokenizer([syn.policy_prompt(p) + syn.worked_solution(p) for p in problems])
    )


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


SMALL = TinyRecipe(
    train_problems=64,
    policy_steps=3,
    policy_warmup=1,
    genrm_seed_steps=2,
    genrm_base_steps=2,
    genrm_steps=3,
    eval_problems=4,
    genrm_own_samples=4,
    batch_size=4,
)


@pytest.mark.slow
def test_build_is_deterministic_and_its_manifest_names_every_file(tmp_path: Path) -> None:
    first = build_tiny_models(tmp_path / "a", seed=0, recipe=SMALL)
    second = build_tiny_models(tmp_path / "b", seed=0, recipe=SMALL)
    assert first["files"] == second["files"] == folder_checksums(tmp_path / "a")
    for name in (
        "tokenizer.json",
        "policy/model.safetensors",
        "genrm/config.json",
        "genrm/generation_config.json",
    ):
        assert name in first["files"]
    assert first["recipe"]["threads"] == 1 and first["built_with"]["threads"] == 1
    other = build_tiny_models(tmp_path / "c", seed=1, recipe=SMALL)
    assert other["files"]["policy/model.safetensors"] != first["files"]["policy/model.safetensors"]


def test_a_damaged_shipped_file_is_refused_in_one_line(tmp_path: Path) -> None:
    copy = tmp_path / "weights"
    shutil.copytree(WEIGHTS, copy)
    ensure_tiny_models(copy)  # intact
    blob = copy / "genrm" / "model.safetensors"
    data = bytearray(blob.read_bytes())
    data[-1] ^= 1
    blob.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"genrm/model.safetensors.*git checkout") as err:
        ensure_tiny_models(copy)
    assert "\n" not in str(err.value)
    (copy / "manifest.json").unlink()
    with pytest.raises(FileNotFoundError, match="make_tiny_models.py --install"):
        ensure_tiny_models(copy)


def test_shipped_models_load_without_transformers() -> None:
    models = ensure_tiny_models()
    for folder in (models.policy, models.genrm):
        for name in (
            "config.json",
            "model.safetensors",
            "tokenizer.json",
            "generation_config.json",
        ):
            assert (folder / name).is_file()
    assert json.loads((models.policy / "config.json").read_text())["model_type"] == "qwen2"
    # the bands the embedded default promises (docs/usage.md, the embedded default)
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
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
