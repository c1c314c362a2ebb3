"""Counts what one eager decode step of the embedded engine launches and syncs (tools/bench_launches.py).

An aten operator reaching the dispatcher below autograd launches a kernel on a GPU unless it only
makes a view or alias of its input, or only allocates; in-place operators write, so they count.
A host sync is a call that reads a tensor's value on the host (item, tolist, int, float, bool),
counted inside the model's forward only: the engine's own host tensors are not on the device."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from pivot.engine import Engine, EngineConfig, Request, SamplingParams
from pivot.model import CausalLM, ModelArgs

ALLOCATIONS = {"empty", "empty_strided", "empty_like", "new_empty", "new_empty_strided"}
SYNC_METHODS = ("item", "tolist", "__int__", "__float__", "__bool__", "__index__")


@dataclasses.dataclass
class StepCount:
    ops: int  # kernels the step would launch on a GPU
    syncs: int  # host reads of device values inside the model's forward
    graphs: str  # why the engine's decode graphs never take this model ('' when they can)


def launches(func: torch._ops.OpOverload) -> bool:
    schema = func._schema
    if func._overloadpacket.__name__ in ALLOCATIONS:
        return False
    writes = any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)
    aliases = any(r.alias_info is not None for r in schema.returns)
    return writes or not aliases


class OpCounter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops = 0

    def __torch_dispatch__(
        self, func: torch._ops.OpOverload, types: Any, args: Any = (), kwargs: Any = None
    ) -> Any:
        self.ops += launches(func)
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def counting_syncs(module: torch.nn.Module) -> Iterator[list[int]]:
    """While open, counts SYNC_METHODS calls made inside `module`'s forward (counter[0])."""
    counter, inside = [0], [False]
    saved = {name: getattr(torch.Tensor, name) for name in SYNC_METHODS}

    def wrap(method: Any) -> Any:
        def counted(self: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            counter[0] += inside[0]
            return method(self, *args, **kwargs)

        return counted

    def enter(*_: Any) -> None:
        inside[0] = True

    def leave(*_: Any) -> None:
        inside[0] = False

    hooks = [module.register_forward_pre_hook(enter), module.register_forward_hook(leave)]
    try:
        for name, method in saved.items():
            setattr(torch.Tensor, name, wrap(method))
        yield counter
    finally:
        for name, method in saved.items():
            setattr(torch.Tensor, name, method)
        for hook in hooks:
            hook.remove()


def count_step(args: ModelArgs, batch: int, prompt: int, seed: int = 0) -> StepCount:
    """Prefill `batch` random prompts of `prompt` tokens on CPU, then count one decode step."""
    torch.manual_seed(seed)
    model = CausalLM(args).eval()
    config = EngineConfig(
        kv_capacity_tokens=batch * (prompt + 8) + 256,
        max_running_seqs=batch,
        max_prefill_tokens=max(batch * prompt, 64),
        decode_graphs="off",
    )
    engine = Engine(model, config, device="cpu")
    gen = torch.Generator().manual_seed(seed)
    for i in range(batch):
        ids = torch.randint(1, args.vocab_size, (prompt,), generator=gen).tolist()
        sampling = SamplingParams(temperature=0, max_new_tokens=4, ignore_eos=True)
        engine.add(Request(i, ids, sampling))
    engine.step()  # the prefill, in one step
    assert engine.progress() and min(engine.progress().values()) == 1, "prefill took two steps"
    counter = OpCounter()
    with torch.no_grad(), counting_syncs(model.model) as syncs, counter:
        engine.step()
    return StepCount(counter.ops, syncs[0], engine.runner.graphs.why_not)
