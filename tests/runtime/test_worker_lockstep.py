"""The worker loop when a rank joins a replica of several ranks (TP=2) in the middle of a batch of
control messages: what follows the ShiftUp in that batch is slot-wide business, acted on only
through the leader's forward, so leader and follower see it in the same loop.

Found as a hang in CI (`test_chaos_with_kv_migration_exactly_once[2]`): the controller sent
ShiftUp(reward0) and then Stop; the follower received both in one batch and stopped at once,
while its leader, which received them in two batches, waited for it in the forward's broadcast.
(The controller now also sends its Stop only once no shift is in flight: a leader that left one
slot and joined another in one batch would otherwise forward the Stop to its old follower in the
old slot and wait for it in the new one.) The fakes here stand for the engine role and the
leader's broadcast; the loop is the real one."""

from __future__ import annotations

from typing import Any

from pivot.dist import ClusterSpec, SlotTable
from pivot.runtime.control import messages as m
from pivot.runtime.job.worker import Worker


class Endpoint:
    def __init__(self, batches: list[list[object]]) -> None:
        self.batches, self.sent = batches, []

    def send(self, msg: object) -> None:
        self.sent.append(msg)

    def recv_all(self, timeout_ms: int) -> list[object]:
        return self.batches.pop(0) if self.batches else []


class Role:
    """An engine role that records what it was asked to do."""

    kv_migration = True

    def __init__(self) -> None:
        self.requests: list[Any] = []
        self.steps = 0

    def shift_up(self, slot: int, group: object, read: object) -> tuple[int, dict]:
        return 0, {}

    def add(self, requests: list[Any]) -> None:
        self.requests += requests

    def has_work(self) -> bool:
        return bool(self.requests)

    def step(self) -> list:
        self.steps += 1
        return []

    def stats(self) -> tuple[dict, dict]:
        return {}, {}

    def checksum(self) -> float:
        return 0.0


class Trainer:
    def prewarm(self) -> None:
        pass


class Weights:
    verify, last_read_bytes, last_remote_bytes = False, 0, 0


class LockstepWorker(Worker):
    """The slot's broadcast replaced by a log: a leader's forward is recorded, a follower
    receives what the test says the leader forwarded."""

    def __init__(self, rank: int, batches: list[list[object]], leader_sends: list[list]) -> None:
        spec = ClusterSpec(world_size=2, rank=rank, local_world_size=2)
        table = SlotTable.build(spec, rollout_tp=2, reward_tp=2, train_devices=1)
        roles = {"rollout": Role(), "reward": Role()}
        groups = {slot.name: object() for slot in table.all()}
        fakes: dict[str, Any] = {  # stand-ins for what the loop touches
            "groups": groups,
            "endpoint": Endpoint(batches),
            "inference": roles,
            "trainer": Trainer(),
            "weights": Weights(),
        }
        super().__init__(spec=spec, table=table, **fakes)
        self.forwarded: list[list[object]] = []
        self.leader_sends = leader_sends

    def _forward(self, msgs: list[object]) -> list[object]:
        if self._leader():
            self.forwarded.append(list(msgs))
            return msgs
        self._later += [msg for msg in msgs if isinstance(msg, m.ShiftUp)]
        return self.leader_sends.pop(0) if self.leader_sends else []


def test_follower_stops_only_through_the_leaders_forward() -> None:
    # rank 1 follows in reward0 = ranks (0, 1); its own Stop arrives in the ShiftUp's batch
    follower = LockstepWorker(1, [[m.ShiftUp("reward", 0, 0), m.Stop()]], [[], [m.Stop()]])
    follower.run()
    assert follower.stopped and follower.role == "reward"
    assert not follower.leader_sends  # it left the loop on the leader's Stop, the second forward


def test_leader_forwards_what_followed_its_shift_up() -> None:
    request = object()
    batches = [[m.ShiftUp("reward", 0, 0), m.Generate(0, [request]), m.Stop()]]  # type: ignore[list-item]
    leader = LockstepWorker(0, batches, [])
    leader.run()
    # the Generate and the Stop went out to the follower in one forward, in their order
    assert [[type(x) for x in msgs] for msgs in leader.forwarded] == [[m.Generate, m.Stop]]
    assert leader.inference["reward"].requests == [request]
    assert leader.inference["reward"].steps == 0  # stopped before any step
