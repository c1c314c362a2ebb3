"""vLLM (its CPU build, run for real) behind Pivot's engine protocol, held against transformers.

The engine runs in its own venv (tools/vllm_venv.py, built under .cache/ on first use, about
1.5 minutes); tests/engine/vllm_driver.py drives one `VllmEngine` there through the conformance
scenario (held to the protocol's rules by test_conformance.py, from the same run: the
`vllm_record` fixture) and reports, and the oracles here are transformers' own forward passes
over the same weights: greedy parity, and a policy update in flight whose tokens after the
switch follow the new weights over the K/V the old ones computed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from tests.conftest import ROOT
from tests.engine.conformance import NEW, PROMPTS, UPDATED

pytestmark = pytest.mark.slow


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


def test_vllm_matches_transformers(vllm_record: dict, vllm_weights: tuple[Path, Path]) -> None:
    """The conformance scenario's vLLM run (test_conformance.py holds it to the protocol's
    rules) against transformers: its greedy runs, and its in-flight update, old weights up to
    the switch and the new ones after it over the kept K/V; seeded sampling reproduces."""
    got, r = vllm_record, vllm_record["conformance"]
    old, new = (hf(w) for w in vllm_weights)
    want = {i: greedy(old, PROMPTS[i], NEW) for i in range(3)}
    for i in range(3):  # greedy tokens equal, log-probs close
        out = r["reference"][str(i)]
        assert out["ids"] == want[i][0], f"prompt {i}"
        assert max(abs(a - b) for a, b in zip(out["logprobs"], want[i][1])) < 1e-3
    seeded = got["seeded"]
    assert seeded["40"] == seeded["41"] != seeded["42"]
    for out, rid, repair in ((r["updated"], 30, True), (got["updated_unrepaired"], 32, False)):
        prompt = PROMPTS[rid % 3]
        (v0, s0), (v1, k) = out["starts"]
        assert (v0, s0, v1) == (0, 0, 1) and 4 <= k < UPDATED and out["version"] == 0
        assert out["ids"][:k] == greedy(old, prompt, k)[0]
        expected = updated_in_flight(old, new, prompt, out["ids"], k, UPDATED)
        assert expected != greedy(old, prompt, UPDATED)[0][k:]  # the update changes the tokens
        if repair:
            assert out["ids"][k:] == expected
        else:  # vLLM 0.32's stale packed lm_head: neither version's tokens
            assert out["ids"][k:] != expected
    seconds = r["seconds"]
    print(
        f"vllm: build {got['build_s']:.1f} s, release {seconds['release']:.2f} s, "
        f"resume (rebuild) {seconds['resume']:.1f} s, reload {seconds['load']:.3f} s, "
        f"in-flight update {seconds['update']:.3f} s"
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
