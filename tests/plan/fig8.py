"""The situation of the paper's Figure 8, as a snapshot (shared by the plan tests)."""

from __future__ import annotations

from pivot.plan import ClusterSnapshot
from pivot.sched import Replica, SeqState, ThroughputModel

RO_MODEL = ThroughputModel(A=1e-6, B=0.010, C=2e-4, D=0.005)
RM_MODEL = ThroughputModel(A=2e-6, B=0.020, C=4e-4, D=0.010)
TRAIN_ID = 200


def figure8(train_batch_ready: bool = False) -> ClusterSnapshot:
    """32 GPUs: reward replicas of 4 GPUs (slots 100-107), rollout replicas of 1 GPU
    (slots 0-31), training over GPUs 24-31. Up now: reward on GPUs 0-15, rollout on 16-23,
    training (idle, batch not ready) on 24-31. Reward is the bottleneck."""
    slots = [Replica(i, "rollout", (i,), 100_000, RO_MODEL) for i in range(32)]
    slots += [
        Replica(100 + i, "reward", tuple(range(4 * i, 4 * i + 4)), 200_000, RM_MODEL)
        for i in range(8)
    ]
    slots.append(Replica(TRAIN_ID, "train", tuple(range(24, 32))))
    active = {100, 101, 102, 103, TRAIN_ID, *range(16, 24)}
    running: dict[int, tuple[SeqState, ...]] = {}
    sid = 0
    for rid in (100, 101, 102, 103):
        running[rid] = tuple(SeqState(sid + j, 1000, 500) for j in range(60))
        sid += 60
    for rid in range(16, 24):
        n = 4 if rid < 20 else 10  # GPUs 16-19 are lighter: the cheaper rollout pair
        running[rid] = tuple(SeqState(sid + j, 300, 200) for j in range(n))
        sid += n
    queue = tuple(SeqState(sid + j, 1200, 300) for j in range(145))
    return ClusterSnapshot(
        tuple(slots),
        frozenset(active),
        running,
        {"reward": queue},
        train_batch_ready=train_batch_ready,
    )
