"""Control-plane messages between the controller (rank 0) and the workers. All dataclasses
with concrete field types: pivot/runtime/control/wire.py encodes them as MessagePack and decodes each
back into its own class, checked against these annotations (nothing is pickled). Controller ->
worker messages name the slot they concern; a worker answers with the records at the bottom."""

from __future__ import annotations

from dataclasses import dataclass, field

from pivot.engine.sequence import EngineStats, Output, Request
from pivot.rl.batch import TrainBatch
from pivot.runtime.records.manifest import FileDigest


# ---- controller -> worker ------------------------------------------------------------------
@dataclass
class ShiftUp:
    role: str  # rollout | reward | train
    slot: int
    version: int  # GPS version to Read (policy); GenRM is never written, always version 0


@dataclass
class ShiftDown:
    role: str
    slot: int


@dataclass
class Generate:
    slot: int
    requests: list[Request]


@dataclass
class AbortSequences:
    slot: int
    ids: list[int]


@dataclass
class UpdateWeights:
    slot: int
    version: int


@dataclass
class TrainStep:
    step: int
    batch: TrainBatch  # prompts, responses, behaviour log-probs, advantages


@dataclass
class SaveCheckpoint:
    step: int
    path: str


@dataclass
class Stop:
    reason: str = "done"


@dataclass
class ResizeTraining:
    """To every rank, while the trainer is down: the training slot is `ranks` from now on
    (pivot/runtime/control/sizing.py). Its trainer is built anew on its next shift up, from
    `checkpoint` (the step boundary's, any number of old ranks) or, when empty, as a first
    shift up builds it (GPS, or the checkpoint the launch resumed from)."""

    ranks: list[int]
    checkpoint: str = ""


# ---- worker -> controller ------------------------------------------------------------------
@dataclass
class Hello:
    rank: int
    host: int


@dataclass
class Stats:
    rank: int
    role: str
    slot: int
    stats: EngineStats
    time: float
    progress: dict[int, int] = field(default_factory=dict)  # seq id -> tokens generated so far


@dataclass
class Finished:
    rank: int
    role: str
    slot: int
    outputs: list[Output]


@dataclass
class Aborted:
    rank: int
    role: str
    slot: int
    partials: list[Request]  # with the tokens generated so far


@dataclass
class ShiftDone:
    rank: int
    role: str
    slot: int
    up: bool
    version: int
    phases: dict[str, float] = field(default_factory=dict)  # phase name -> seconds
    checksum: float = 0.0  # sum of the weights after the shift (tests compare with GPS)
    partials: list[Request] = field(default_factory=list)  # sequences still held at shift down
    read_bytes: int = 0  # bytes this rank Read from GPS (shift up): its share of the model
    remote_bytes: int = 0  # of those, bytes read from another host's copy


@dataclass
class WeightsUpdated:
    rank: int
    slot: int
    version: int
    seconds: float


@dataclass
class Trained:
    rank: int
    step: int
    version: int
    metrics: dict[str, float]


@dataclass
class Saved:
    rank: int
    step: int
    files: list[FileDigest]  # of the files this rank wrote, fsynced


@dataclass
class Failed:
    rank: int
    error: str


@dataclass
class EngineFailed:
    """The engine of a replica this rank leads failed; the rank holds what it salvaged (the
    requests with their tokens) and hands it back when the replica shifts down."""

    rank: int
    role: str
    slot: int
    error: str
    salvaged: int


# Wire codes: a frame names its message type by index in this tuple, so only these classes can
# ever be built from a frame. Append new types at the end; never reorder (codes would change).
MESSAGE_TYPES: tuple[type, ...] = (
    ShiftUp,
    ShiftDown,
    Generate,
    AbortSequences,
    UpdateWeights,
    TrainStep,
    SaveCheckpoint,
    Stop,
    Hello,
    Stats,
    Finished,
    Aborted,
    ShiftDone,
    WeightsUpdated,
    Trained,
    Saved,
    Failed,
    EngineFailed,
    ResizeTraining,
)
ToWorker = (
    ShiftUp
    | ShiftDown
    | Generate
    | AbortSequences
    | UpdateWeights
    | TrainStep
    | SaveCheckpoint
    | Stop
    | ResizeTraining
)
ToController = (
    Hello
    | Stats
    | Finished
    | Aborted
    | ShiftDone
    | WeightsUpdated
    | Trained
    | Saved
    | Failed
    | EngineFailed
)
Message = ToWorker | ToController
