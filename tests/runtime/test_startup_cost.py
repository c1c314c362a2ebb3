"""What every rank pays before the first step: no rank imports FSDP, torch._dynamo or sympy just to
start.

Each is up to seconds of CPU per process (FSDP pulls in DTensor and sympy; dynamo is imported by
the first Python decomposition run on the meta device, sympy by `empty_like` of a meta tensor),
and on a 2-core machine the four ranks pay them one after another. A fresh interpreter, as
torchrun starts each rank.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import sys
import pivot.runtime.job.launch
from pivot.model.hf_folder import check_folder, from_pretrained
from pivot.tiny.shipped import ensure_tiny_models
tiny = ensure_tiny_models()
check_folder(tiny.policy)
check_folder(tiny.genrm)
from_pretrained(tiny.policy)
from pivot.model import CausalLM, ModelArgs
from pivot.model.meta_init import materialize, params_on_meta
with params_on_meta():
    engine_model = CausalLM(ModelArgs.load(tiny.policy))
materialize(engine_model, "cpu")  # as an engine rank gives its model storage
print(sorted(m for m in ("torch.distributed.fsdp", "torch._dynamo", "sympy") if m in sys.modules))
"""


@pytest.mark.slow
def test_start_up_imports_neither_fsdp_nor_dynamo_nor_sympy() -> None:
    out = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_checked_shapes_are_the_models() -> None:
    """Shapes read without the meta device's initialisers are still every parameter's shape."""
    import torch

    from pivot.model import CausalLM
    from pivot.model.args import ModelArgs
    from pivot.model.hf_folder import tensor_headers
    from pivot.model.meta_init import params_on_meta
    from pivot.tiny.shipped import ensure_tiny_models

    path = ensure_tiny_models().policy
    with params_on_meta():
        meta = {k: tuple(v.shape) for k, v in CausalLM(ModelArgs.load(path)).state_dict().items()}
    on_disk = {k: shape for k, (shape, _) in tensor_headers(path).items()}
    real = {k: tuple(v.shape) for k, v in CausalLM(ModelArgs.load(path)).state_dict().items()}
    assert meta == real
    assert set(on_disk) <= set(meta) and all(meta[k] == on_disk[k] for k in on_disk)
    assert torch.nn.init.normal_.__module__ == "torch.nn.init"  # the patch is undone


PREWARM = """
import sys
from pivot.config import ModelConfig, TrainConfig
from pivot.model import ModelArgs
from pivot.roles.training import TrainingRole
from pivot.tiny.shipped import ensure_tiny_models
args = ModelArgs.load(ensure_tiny_models().policy)
role = TrainingRole(
    args=args, group={group}, train=TrainConfig(), model=ModelConfig(), device="cpu",
    temperature=1.0, policy=None,
)
role.prewarm()
role.prewarm()  # once
if role._prewarm is not None:
    role._prewarm.join()
print(sorted(m for m in ("torch.distributed.fsdp", "torch._dynamo") if m in sys.modules))
"""


@pytest.mark.slow
def test_only_a_training_rank_prewarms_its_first_shift_up() -> None:
    """A rank of the training pool imports FSDP and torch._dynamo on a background thread once its
    engine is up; any other rank never does."""
    for group, want in (
        ("None", "[]"),
        ("object()", "['torch._dynamo', 'torch.distributed.fsdp']"),
    ):
        out = subprocess.run(
            [sys.executable, "-c", PREWARM.format(group=group)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        assert out.stdout.strip().splitlines()[-1] == want
