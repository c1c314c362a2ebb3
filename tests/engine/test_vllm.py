"""vLLM (its CPU build, run for real) behind Pivot's engine protocol, held against transformers.

The engine runs in its own venv (tools/vllm_venv.py, built under .cache/ on first use, about
1.5 minutes); tests/engine/vllm_driver.py drives `VllmEngine` there and reports, and the oracles
here are transformers' own forward passes over the same weights: greedy parity, an abort resumed
on another replica, a shift down and up with requests running, and a policy update in flight
whose tokens after the switch follow the new weights over the K/V the old ones computed."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch

from pivot.model import CausalLM, ModelArgs, save_pretrained
from tests.conftest import ROOT

pytestmark = pytest.mark.slow
TOKENIZER = ROOT / "pivot" / "tiny" / "weights" / "tokenizer.json"


def tiny_model(path: Path, seed: int, tied: bool = True, base: Path | None = None) -> Path:
    """A random Qwen2-family model vLLM's CPU attention takes (head_dim 32); with `base`, that
    model's weights moved far enough that greedy tokens change."""
    args = ModelArgs(
        family="qwen2",
        vocab_size=284,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=1024,
        tie_word_embeddings=tied,
        attention_bias=True,
    )
    torch.manual_seed(seed)
    model = CausalLM(args)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(std=0.2)
        if base is not None:
            old = CausalLM(args)
            old.load_state_dict(torch.load(base / "state.pt"), strict=False)
            for p, q in zip(model.parameters(), old.parameters()):
                p.copy_(q + 0.5 * p)
    save_pretrained(model, path, TOKENIZER)
    torch.save(model.state_dict(), path / "state.pt")
    return path


def run_driver(python: Path, script: str, *args: str, timeout: float = 900) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [str(python), str(ROOT / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def hf(path: Path):
    import transformers

    return transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()


@torch.no_grad()
def greedy(model, ids: list[int], n: int) -> tuple[list[int], list[float]]:
    toks, lps = [], []
    for _ in range(n):
        lp = torch.log_softmax(model(torch.tensor([ids + toks])).logits[0, -1].float(), -1)
        toks.append(int(lp.argmax()))
        lps.append(float(lp.max()))
    return toks, lps


@torch.no_grad()
def updated_in_flight(old, new, ids: list[int], made: list[int], k: int, n: int) -> list[int]:
    """Tokens k.. when tokens 0..k-1 came from `old` and the rest from `new` over the K/V `old`
    computed (the prompt and tokens 0..k-2; token k-1's K/V is the first `new` computes)."""
    cache = old(torch.tensor([ids + made[: k - 1]]), use_cache=True).cache
    toks, last = [], made[k - 1]
    for _ in range(n - k):
        out = new(torch.tensor([[last]]), cache=cache, use_cache=True)
        cache, last = out.cache, int(out.logits[0, -1].argmax())
        toks.append(last)
    return toks


def test_vllm_behind_the_engine_protocol(tmp_path: Path, vllm_python: Path) -> None:
    w0 = tiny_model(tmp_path / "w0", seed=0)
    w1 = tiny_model(tmp_path / "w1", seed=1, base=w0)
    got = run_driver(vllm_python, "tests/engine/vllm_driver.py", str(w0), str(w1))
    old, new = hf(w0), hf(w1)
    from tests.engine.vllm_driver import NEW, PROMPTS

    want = {i: greedy(old, PROMPTS[i], NEW) for i in range(3)}
    for i in range(3):  # greedy tokens equal, log-probs close
        out = got["parity"][str(i)]
        assert out["ids"] == want[i][0], f"prompt {i}"
        assert max(abs(a - b) for a, b in zip(out["logprobs"], want[i][1])) < 1e-3
        assert out["reason"] == "length" and out["version"] == 0
    seeded = got["seeded"]
    assert seeded["40"] == seeded["41"] != seeded["42"]
    # abort after some tokens, resumed on the other replica: the uninterrupted tokens
    assert 4 <= got["abort_at"] < NEW
    assert got["resumed"]["ids"] == want[10 % 3][0]
    assert len(got["resumed"]["logprobs"]) == NEW
    # shift down with two requests running, up again: nothing lost, nothing changed
    assert sorted(got["released_at"]) == ["20", "21"] and min(got["released_at"].values()) >= 3
    for rid in ("20", "21"):
        assert got["shifted"][rid]["ids"] == want[int(rid) % 3][0], rid
    # in flight: old weights up to the switch, the new ones after it over the kept K/V
    for repair in (True, False):
        out = got[f"updated_repair_{repair}"]
        prompt = PROMPTS[(30 if repair else 31) % 3]
        (v0, s0), (v1, k) = out["starts"]
        assert (v0, s0, v1) == (0, 0, 1) and 4 <= k < 16 and out["version"] == 0
        assert out["ids"][:k] == greedy(old, prompt, k)[0]
        expected = updated_in_flight(old, new, prompt, out["ids"], k, 16)
        assert expected != greedy(old, prompt, 16)[0][k:]  # the update changes the tokens
        if repair:
            assert out["ids"][k:] == expected
        else:  # vLLM 0.32's stale packed lm_head: neither version's tokens
            assert out["ids"][k:] != expected
    print(
        f"vllm: build {got['build_s']:.1f} s, release {got['release_s']:.2f} s, "
        f"resume (rebuild) {got['resume_s']:.1f} s, reload {got['load_s']:.3f} s, "
        f"in-flight update {got['update_s']:.3f} s"
    )


def test_the_cpu_build_refuses_a_head_size_in_one_line(vllm_python: Path) -> None:
    """The shipped tiny models have head_dim 16, which vLLM's CPU attention has no kernel for."""
    env = {
        "WORLD_SIZE": "4",
        "LOCAL_WORLD_SIZE": "4",
        "RANK": "0",
        "PATH": "",
        "PYTHONPATH": str(ROOT),
    }
    out = subprocess.run(
        [str(vllm_python), str(ROOT / "pivot" / "main.py"), "--reward.engine.backend", "vllm"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 2, out.stderr[-2000:]
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith(
        "pivot: cannot start: --reward.engine.backend vllm: vLLM's CPU attention"
    )
