"""Build a model without storage, then give storage only to what this rank keeps.

`params_on_meta()` creates every parameter on the meta device while buffers (rotary tables) stay
real, so a 72B model costs nothing to construct; TP sharding or `fully_shard` then shrinks the
meta parameters to this rank's slice, and `materialize` allocates exactly that (uninitialised:
the caller loads the values, from GPS or from safetensors slices).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from functools import partial

import torch
from torch import nn

_depth = 0  # how many `params_on_meta` blocks are open (building_on_meta)


@contextlib.contextmanager
def meta_normal_skipped() -> Iterator[None]:
    """`nn.init.normal_` does nothing to a meta tensor inside. On meta it runs a Python
    decomposition whose first call imports torch._dynamo, about 2 CPU-seconds per process, paid
    by every rank that only checks a checkpoint's shapes; a meta tensor has no values to draw."""
    normal = nn.init.normal_

    def normal_(tensor: torch.Tensor, *args: object, **kwargs: object) -> torch.Tensor:
        return tensor if tensor.is_meta else normal(tensor, *args, **kwargs)  # type: ignore[arg-type]

    nn.init.normal_ = normal_
    try:
        yield
    finally:
        nn.init.normal_ = normal


@contextlib.contextmanager
def params_on_meta() -> Iterator[None]:
    """Parameters registered inside are moved to the meta device as they are registered. Their
    construction-time `torch.empty` never touches its pages and the initialisers then run on
    meta, so nothing is resident. Not thread-safe: it patches `nn.Module.register_parameter`."""
    global _depth
    register = nn.Module.register_parameter

    def on_meta(module: nn.Module, name: str, param: nn.Parameter | None) -> None:
        register(module, name, param)
        if param is not None and not param.is_meta:
            module._parameters[name] = nn.Parameter(
                param.to("meta"), requires_grad=param.requires_grad
            )

    # patched for the block and restored below; the plain function's signature is the method's
    nn.Module.register_parameter = on_meta  # type: ignore[method-assign,assignment]
    _depth += 1
    try:
        with meta_normal_skipped():
            yield
    finally:
        _depth -= 1
        nn.Module.register_parameter = register  # type: ignore[method-assign]


def building_on_meta() -> bool:
    """Inside `params_on_meta`: layers that choose their own device (TE's) should choose meta."""
    return _depth > 0


def is_meta(model: nn.Module) -> bool:
    return any(p.is_meta for p in model.parameters())


@torch.no_grad()
def materialize(model: nn.Module, device: torch.device | str) -> None:
    """Uninitialised storage on `device` for every (possibly sharded) meta parameter; buffers keep
    their values and tied parameters stay tied."""
    first: dict[int, str] = {}
    ties: list[tuple[str, str]] = []  # (alias, the name it shares a parameter with)
    for name, p in model.named_parameters(remove_duplicate=False):
        source = first.setdefault(id(p), name)
        if source != name:
            ties.append((name, source))
    buffers = {name: b.detach().to(device) for name, b in model.named_buffers()}
    model._apply(partial(_empty_on, torch.device(device)))  # Module.to_empty, but see _empty_on
    for name, b in model.named_buffers():
        b.copy_(buffers[name])
    for name, source in ties:
        owner, _, attr = name.rpartition(".")
        setattr(model.get_submodule(owner), attr, model.get_parameter(source))


def _empty_on(device: torch.device, t: torch.Tensor) -> torch.Tensor:
    """Uninitialised storage like `t` on `device`. A plain tensor's comes from the factory:
    `torch.empty_like` of a meta tensor runs torch's Python reference (`_refs.empty_like`), whose
    first call imports sympy through torch.fx's symbolic shapes, 0.6-0.8 s of every engine
    rank's start-up; a sharded (DTensor) one keeps `empty_like`, which keeps its placements."""
    if type(t) in (torch.Tensor, nn.Parameter):
        return torch.empty(t.shape, dtype=t.dtype, device=device)
    return torch.empty_like(t, device=device)
