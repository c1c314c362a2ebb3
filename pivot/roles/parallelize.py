"""FSDP2 (and activation checkpointing) applied to a policy from outside the model, torchtitan's way."""

from __future__ import annotations

import torch
import torch.distributed as dist

from pivot.model import CausalLM
from pivot.model.meta_init import is_meta, materialize


def parallelize(
    model: CausalLM,
    group: dist.ProcessGroup,
    device: torch.device,
    activation_checkpointing: bool,
    compute_dtype: torch.dtype = torch.float32,
    compile_layers: bool = False,
) -> CausalLM:
    """Every decoder layer, then the root, `fully_shard`-ed on `group` with fp32 parameters (the
    master); a `compute_dtype` below fp32 (`--model.dtype bfloat16`) is FSDP2 mixed precision:
    parameters gathered in that dtype for forward and backward, gradients reduced in fp32 into the
    fp32 master, so AdamW steps in fp32 (on CPU and CUDA alike). With `activation_checkpointing`
    each layer is checkpointed first (composable AC keeps the HF parameter names, a wrapper
    module would prefix them; before FSDP, so recompute re-gathers the layer). With
    `compile_layers` each layer is then `torch.compile`d (torchtitan's order: checkpointing,
    compile, FSDP): its norms, rotary, projections and MLP fuse; the packed rows' attention runs
    its own kernel between graphs (pivot/model/varlen.py). A model built on
    the meta device gets storage for this rank's shards only, uninitialised."""
    # imported here, not at the top: FSDP pulls in DTensor and sympy, about a quarter of a rank's
    # start-up CPU, which the ranks that never train (most of them) should not pay
    from torch.distributed._composable import checkpoint as checkpoint_activations
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    meta = is_meta(model)
    model = model.to(dtype=torch.float32) if meta else model.to(device=device, dtype=torch.float32)
    mesh = DeviceMesh.from_group(group, device_type=device.type)
    mp = (
        MixedPrecisionPolicy()
        if compute_dtype == torch.float32
        else MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=torch.float32)
    )
    for layer in model.model.layers:
        if activation_checkpointing:
            checkpoint_activations(layer)
        if compile_layers:  # in place (names kept); the attention kernel stays outside the graph
            layer.compile(dynamic=None)
        fully_shard(layer, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    if meta:
        materialize(model, device)
    return model
