"""The sglang adapter's protocol mapping against a fake in-process engine (no sglang here)."""
from __future__ import annotations

import asyncio

import pytest
import torch

from pivot.engine import Request, SamplingParams
from pivot.engine.config import EngineConfig
from pivot.engine.sglang_adapter import SglangEngine
from tests.engine.conftest import tiny_args


class FakeSglang:
    """Streams token (prompt length + i) % 50 with log-prob -i, one per 1 ms, cumulatively."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.aborted: set[str] = set()
        self.updates: list = []
        self.tokenizer_manager = self

    def get_server_info(self) -> dict:
        return {"context_length": 256, "internal_states": [{"max_total_num_tokens": 1000}]}

    def abort_request(self, rid: str) -> None:
        self.aborted.add(rid)

    async def async_generate(self, input_ids, sampling_params, return_logprob, stream, rid):
        async def gen():
            pairs = []
            for i in range(sampling_params["max_new_tokens"]):
                await asyncio.sleep(0.001)
                if rid in self.aborted:
                    yield {"meta_info": {"completion_tokens": i, "output_token_logprobs": pairs, "finish_reason": {"type": "abort"}}}
                    return
                pairs = pairs + [(-float(i), (len(input_ids) + i) % 50, None)]
                done = i + 1 == sampling_params["max_new_tokens"]
                yield {"meta_info": {"completion_tokens": i + 1, "output_token_logprobs": pairs,
                                     "finish_reason": {"type": "length"} if done else None}}
        return gen()

    def update_weights_from_tensor(self, pairs, flush_cache):
        self.updates.append([n for n, _ in pairs])
        return True, "ok"


def test_adapter_protocol() -> None:
    fake = FakeSglang()
    eng = SglangEngine(fake, EngineConfig(), tiny_args())
    assert eng.stats().kv_total_tokens == 1000
    eng.add(Request(1, [5, 6, 7], SamplingParams(max_new_tokens=4)))
    eng.add(Request(2, [5] * 10, SamplingParams(max_new_tokens=200)))
    outs = []
    while not outs:
        outs = eng.step()
    assert outs[0].id == 1 and outs[0].output_ids == [3, 4, 5, 6] and outs[0].finish_reason == "length"
    assert outs[0].output_logprobs == [0.0, -1.0, -2.0, -3.0]
    parts = eng.abort([2, 9])
    assert parts.unknown_ids == [9] and len(parts[0].output_ids) == len(parts[0].output_logprobs) >= 1
    assert not eng.has_work()
    with pytest.raises(ValueError, match="exceed"):
        eng.add(Request(3, [1] * 300, SamplingParams()))
    with pytest.raises(ValueError, match="missing"):
        eng.load_weights({"model.norm.weight": torch.ones(64)}, version=1)
    with torch.device("meta"):
        from pivot.model import CausalLM

        full = dict(CausalLM(tiny_args()).named_parameters())
    eng.load_weights(full, version=4)
    assert eng.weights_version == 4 and len(fake.updates) == 1
