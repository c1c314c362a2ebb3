"""Generation: greedy equals transformers, log-probs, sampling, stop conditions, bad input."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer, decoders
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import WhitespaceSplit

from pivot.engine import Engine, EngineConfig, Request, SamplingParams
from pivot.model import TextTokenizer
from tests.engine.conftest import EOS, prompts, run_all

transformers = pytest.importorskip("transformers")

# small blocks and a small prefill budget so paging and chunked prefill are exercised
CHUNKED = EngineConfig(
    kv_capacity_tokens=1024, block_size=4, max_running_seqs=6, max_prefill_tokens=16
)


@functools.lru_cache(maxsize=2)
def _hf_model(path: Path) -> torch.nn.Module:
    return transformers.AutoModelForCausalLM.from_pretrained(path).eval()


def _hf_greedy(path: Path, prompt: list[int], n: int) -> tuple[list[int], list[float]]:
    hf = _hf_model(path)
    out = hf.generate(
        torch.tensor([prompt]),
        max_new_tokens=n,
        do_sample=False,
        eos_token_id=EOS,
        pad_token_id=0,
        output_logits=True,
        return_dict_in_generate=True,
    )
    ids = out.sequences[0, len(prompt) :].tolist()
    lps = [torch.log_softmax(lg[0].float(), -1)[t].item() for lg, t in zip(out.logits, ids)]
    return ids, lps


@pytest.mark.parametrize(
    "config", [CHUNKED, EngineConfig(kv_capacity_tokens=96, block_size=8, max_running_seqs=8)]
)
def test_greedy_matches_transformers(tiny_path: Path, config: EngineConfig) -> None:
    """The second config's tiny KV cache forces preemption (recompute) mid-run."""
    engine = Engine.from_pretrained(tiny_path, config)
    ps = prompts(8, seed=1)
    for i, p in enumerate(ps):
        engine.add(Request(i, p, SamplingParams(temperature=0, max_new_tokens=12)))
    outs = run_all(engine)
    for i, p in enumerate(ps):
        ref_ids, ref_lps = _hf_greedy(tiny_path, p, 12)
        assert outs[i].output_ids == ref_ids, i
        assert outs[i].finish_reason == ("stop" if ref_ids[-1] == EOS else "length")
        torch.testing.assert_close(
            torch.tensor(outs[i].output_logprobs), torch.tensor(ref_lps), atol=1e-4, rtol=0
        )


def test_seeded_sampling_reproducible_and_filters(tiny_path: Path) -> None:
    def run(params: SamplingParams, seed: int = 0) -> list[list[int]]:
        engine = Engine.from_pretrained(tiny_path, CHUNKED, seed=seed)
        for i, p in enumerate(prompts(4, seed=2)):
            engine.add(Request(i, p, params))
        outs = run_all(engine)
        return [outs[i].output_ids for i in range(4)]

    seeded = SamplingParams(temperature=1.0, top_p=0.9, top_k=20, max_new_tokens=10, seed=7)
    assert run(seeded) == run(seeded, seed=123)  # request seed wins over the engine's
    assert run(seeded) != run(SamplingParams(temperature=1.0, max_new_tokens=10, seed=8))
    greedy = run(SamplingParams(temperature=0, max_new_tokens=10))
    assert run(SamplingParams(temperature=0.7, top_k=1, max_new_tokens=10)) == greedy
    assert run(SamplingParams(temperature=1.3, top_p=1e-6, max_new_tokens=10, seed=3)) == greedy


def _word_tokenizer() -> TextTokenizer:
    vocab = {"<|endoftext|>": EOS, "<|pad|>": 0, **{f"w{i}": i for i in range(2, 96)}}
    tok = Tokenizer(WordLevel(vocab, unk_token="<|pad|>"))
    tok.pre_tokenizer = WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    return TextTokenizer(tok)


def test_stop_strings_ignore_eos_and_max_new(tiny_path: Path) -> None:
    engine = Engine.from_pretrained(tiny_path, CHUNKED, tokenizer=_word_tokenizer())
    p = prompts(1, seed=3)[0]
    engine.add(Request(0, p, SamplingParams(temperature=0, max_new_tokens=20, ignore_eos=True)))
    free = run_all(engine)[0]
    assert len(free.output_ids) == 20 and free.finish_reason == "length"
    k = next(
        j for j in range(2, 20) if free.output_ids[j] not in free.output_ids[:j]
    )  # first repeat-free token
    engine.add(
        Request(
            1,
            p,
            SamplingParams(
                temperature=0, max_new_tokens=20, ignore_eos=True, stop=(f"w{free.output_ids[k]}",)
            ),
        )
    )
    stopped = run_all(engine)[1]
    assert stopped.finish_reason == "stop" and stopped.output_ids == free.output_ids[: k + 1]


def test_bad_requests_rejected_without_disturbing_others(tiny_path: Path) -> None:
    engine = Engine.from_pretrained(tiny_path, EngineConfig(kv_capacity_tokens=64, block_size=8))
    engine.add(Request(0, [5, 6, 7], SamplingParams(temperature=0, max_new_tokens=5)))
    engine.step()
    before = engine.stats()
    with pytest.raises(ValueError, match="request 1: 64 tokens.*max length 64"):
        engine.add(Request(1, [3] * 64, SamplingParams(max_new_tokens=4)))
    with pytest.raises(ValueError, match="request 0: id is already"):
        engine.add(Request(0, [3], SamplingParams()))
    with pytest.raises(ValueError, match="token id 500 is outside"):
        engine.add(Request(2, [3, 500], SamplingParams()))
    with pytest.raises(ValueError, match="stop strings need"):
        engine.add(Request(3, [3], SamplingParams(stop=("x",))))
    assert engine.stats() == before
    assert not engine.can_admit(64) and engine.can_admit(40)
    out = run_all(engine)
    assert list(out) == [0] and len(out[0].output_ids) <= 5
