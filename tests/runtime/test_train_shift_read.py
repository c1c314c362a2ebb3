"""A training shift up reads GPS only the first time (it builds the trainer from it); later ones
restore the exact fp32 master kept on host and read nothing, so no GPS Read sits on the critical
path only to be shape-checked. The worker's shift-up handler with stand-ins for the rest."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from pivot.dist import ClusterSpec, SlotTable, train_group_name
from pivot.runtime.control import messages as m
from pivot.runtime.job.worker import Worker


class Trainer:
    def __init__(self) -> None:
        self.needs_weights, self.version, self.got = True, -1, []

    def join(self, group: Any) -> None:
        self.group = group

    def shift_up(self, shards: Any) -> dict[str, float]:
        self.got.append(shards)
        self.needs_weights, self.version = False, 3
        return {"reload": 0.0}


def test_only_the_first_training_shift_up_reads_gps() -> None:
    reads: list[tuple] = []
    worker = Worker.__new__(Worker)  # only what _shift_up touches
    worker.spec = ClusterSpec(4, 0, 4)
    worker.table = SlotTable.build(worker.spec, 1, 1, 2)
    worker.groups = {s.name: None for s in worker.table.all()}
    worker.groups[train_group_name(worker.table.train.ranks)] = None
    worker.weights = SimpleNamespace(
        read=lambda *a, **k: reads.append(a) or ({"w": 1}, 3),
        last_read_bytes=0,
        last_remote_bytes=0,
        verify=False,
    )
    worker.trainer = Trainer()
    sent: list = []
    worker.endpoint = SimpleNamespace(send=sent.append)
    worker._maybe_stats = lambda force=False: None
    for _ in range(2):
        worker.role = None
        worker._shift_up(m.ShiftUp("train", 0, 3))
    assert len(reads) == 1 and worker.trainer.got == [{"w": 1}, None]
    assert [msg.version for msg in sent] == [3, 3]
