"""The random model both engine benchmarks run (tools/bench_engine.py against `generate`,
tools/bench_engine_vllm.py against vLLM): one module they both import, so neither imports the
other."""

from __future__ import annotations

import atexit
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pivot.model import CausalLM


def bench_model(hidden: int, layers: int) -> tuple[Path, CausalLM]:
    """A random Qwen2-family model in a temporary folder (head_dim 32: vLLM's CPU attention
    takes it), with no EOS, so every request runs its full length."""
    # imported here: bench_engine_vllm's outer process only re-runs itself in vLLM's venv
    from pivot.model import CausalLM, ModelArgs, save_pretrained

    heads = hidden // 32
    args = ModelArgs(
        family="qwen2",
        vocab_size=512,
        hidden_size=hidden,
        intermediate_size=3 * hidden,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=max(heads // 2, 1),
        head_dim=32,
        max_position_embeddings=2048,
    )
    tmp = Path(tempfile.mkdtemp(prefix="bench_engine_"))
    atexit.register(shutil.rmtree, tmp, ignore_errors=True)  # every run left one behind
    model = CausalLM(args)
    save_pretrained(model, tmp)
    return tmp, model
