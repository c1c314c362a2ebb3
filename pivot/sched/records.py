"""Records shared by the scheduler, the planner, the runtime and the simulator.

- `Role`: "rollout", "reward", "train" (a `StrEnum`, so plain strings compare equal).
- `SeqState(seq_id, prompt_len, generated)`: one sequence; `length` = prompt + generated.
  Its KV need is its current `length` (tokens already in the cache). We do not reserve room
  for tokens not yet generated: like vLLM/SGLang admission, growth is the engine's business
  (it preempts when full and the runtime reports that as an abort).
- `Replica(replica_id, role, devices, kv_capacity, model)`: one replica *slot*; training is a
  single slot of role "train" with no KV capacity and no throughput model.
- Commands `Dispatch(seq_id, replica_id)` and `Abort(seq_id, replica_id)`, emitted by the
  scheduler and executed by the runtime (or the simulator).
- `step_major_id(step, counter)`: the sequence id the runtime and the simulator give a new
  sequence of an RL step.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from pivot.sched.throughput import ThroughputModel


class Role(enum.StrEnum):
    ROLLOUT = "rollout"
    REWARD = "reward"
    TRAIN = "train"


INFERENCE_ROLES: tuple[Role, Role] = (Role.ROLLOUT, Role.REWARD)

STEP_ID_SHIFT = 40


def step_major_id(step: int, counter: int) -> int:
    """(step << STEP_ID_SHIFT) + a unique counter: the schedulers queue by ascending id, so the
    oldest step's sequences (the batch training waits for) go first, the judges of its late
    rollouts included, which would otherwise queue behind every younger step's judges."""
    return (step << STEP_ID_SHIFT) + counter


@dataclass(slots=True)
class SeqState:
    """A sequence; `generated` grows with progress and survives an abort (resume, not restart)."""

    seq_id: int
    prompt_len: int
    generated: int = 0

    def __post_init__(self) -> None:
        if self.prompt_len < 0 or self.generated < 0:
            raise ValueError(
                f"SeqState {self.seq_id}: negative length (prompt_len={self.prompt_len}, "
                f"generated={self.generated})"
            )

    @property
    def length(self) -> int:
        return self.prompt_len + self.generated


@dataclass(frozen=True, slots=True)
class Replica:
    """A replica slot: the devices it would hold, its KV capacity (tokens) and its model."""

    replica_id: int
    role: Role
    devices: tuple[int, ...]
    kv_capacity: int = 0
    model: ThroughputModel | None = None

    def __post_init__(self) -> None:
        if self.role not in tuple(Role):
            raise ValueError(f"Replica {self.replica_id}: unknown role {self.role!r}")
        object.__setattr__(self, "role", Role(self.role))
        object.__setattr__(self, "devices", tuple(self.devices))
        if not self.devices or len(set(self.devices)) != len(self.devices):
            raise ValueError(
                f"Replica {self.replica_id}: devices must be non-empty and distinct, got {self.devices}"
            )
        if self.kv_capacity < 0:
            raise ValueError(
                f"Replica {self.replica_id}: kv_capacity must be >= 0, got {self.kv_capacity}"
            )
        if self.role != Role.TRAIN and self.model is None:
            raise ValueError(
                f"Replica {self.replica_id}: a {self.role} replica needs a ThroughputModel"
            )


@dataclass(frozen=True, slots=True)
class Dispatch:
    """Start (or resume, re-prefilling its generated tokens) `seq_id` on `replica_id`."""

    seq_id: int
    replica_id: int


@dataclass(frozen=True, slots=True)
class Abort:
    """Stop `seq_id` on `replica_id`; it returns to the queue keeping its generated tokens."""

    seq_id: int
    replica_id: int


Command = Dispatch | Abort
