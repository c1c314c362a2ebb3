"""`--train.compile`: each decoder layer torch.compile'd under FSDP2 (2 gloo ranks, fp32) trains
as eager does: the same log-probs, loss, gradient norm and gradients to 1e-5, on packed
micro-batches of uneven rows (their attention runs between the compiled graphs)."""

from __future__ import annotations

import pytest
import torch.distributed as dist
from test_trainer import config, optim_state
from test_trainer_packed import uneven_batch
from trainer_harness import spawn, tiny_model

from pivot.roles.trainer import Trainer

pytestmark = pytest.mark.slow  # inductor compiles a C++ kernel per graph: about a minute on CPU


def _compiled_equals_eager(rank: int, world: int, group: dist.ProcessGroup) -> None:
    eager = Trainer(tiny_model(), group, config(micro_batch_tokens=40))
    compiled = Trainer(tiny_model(), group, config(micro_batch_tokens=40, compile=True))
    assert compiled.params.keys() == eager.params.keys()  # names unchanged by the compile
    batch = uneven_batch(0)
    lp = [eager.compute_logprobs(batch.prompt_ids, batch.response_ids),
          compiled.compute_logprobs(batch.prompt_ids, batch.response_ids)]  # fmt: skip
    assert sum(lp[1], []) == pytest.approx(sum(lp[0], []), abs=1e-5)
    m0, m1 = eager.train_step(batch), compiled.train_step(batch)
    assert m1.loss == pytest.approx(m0.loss, abs=1e-5)
    assert m1.grad_norm == pytest.approx(m0.grad_norm, abs=1e-5)
    for a, b in zip(optim_state(eager), optim_state(compiled)):  # exp_avg: the gradients
        assert (a - b).abs().max() < 1e-5


def test_compiled_layers_train_as_eager() -> None:
    spawn(_compiled_equals_eager, 2)
