"""Faults injected on purpose, for the recovery tests and the soak (docs/reliability.md).

The environment variable PIVOT_FAULTS lists them, comma-separated, each `where:role:when`:
- where: `engine_step`, the inference engine raises in its step (as a dead vLLM core, an sglang
  scheduler crash or a CUDA OOM in a decode step do); `engine_stall`, the step first waits
  `STALL_S` (a replica that stops answering for a while); `judge_garbage`, a judge's output is
  replaced by a thinking block that never closes (a judge that rambled to its token budget);
  `train_oom`, a training rank answers that its next micro-batch will not fit in device memory
  (`pivot.roles.oom_guard`); `disk_full`, a training rank's checkpoint write fails as on a full
  disk (ENOSPC; `pivot.roles.collective_write`);
- role: `rollout`, `reward`, `train` or `*`;
- when: a probability per call (`0.01`, drawn from a generator seeded by the rank), or `@N`,
  the N-th call on this rank, once;
- and optionally `:R`: on rank R only.
Unset (every real run): `inject` returns at once.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field

STALL_S = 1.0
"""How long an injected `engine_stall` holds the step."""


class InjectedFault(RuntimeError):
    """A fault PIVOT_FAULTS asked for."""


@dataclass
class Fault:
    where: str
    role: str
    probability: float = 0.0
    at: int = 0
    rank: int = -1
    calls: int = field(default=0, compare=False)


def parse(spec: str) -> list[Fault]:
    """PIVOT_FAULTS' faults; ValueError naming the entry it cannot read."""
    out = []
    for entry in filter(None, (e.strip() for e in spec.split(","))):
        parts = entry.split(":")
        if len(parts) not in (3, 4):
            raise ValueError(f"PIVOT_FAULTS entry {entry!r}: expected where:role:when[:rank]")
        where, role, when = parts[:3]
        try:
            rank = int(parts[3]) if len(parts) == 4 else -1
            fault = (
                Fault(where, role, at=int(when[1:]), rank=rank)
                if when.startswith("@")
                else Fault(where, role, probability=float(when), rank=rank)
            )
        except ValueError:
            raise ValueError(f"PIVOT_FAULTS entry {entry!r}: when is a probability or @N") from None
        out.append(fault)
    return out


_FAULTS: list[Fault] = []
ACTIVE = False
"""Whether any fault is asked for: callers on a hot path check it before anything else."""
_RANK = 0
_RNG = random.Random(1)


def configure(spec: str, rank: int) -> None:
    """Ask for `spec`'s faults on global rank `rank` (at import: PIVOT_FAULTS and RANK; a test
    inside spawned ranks calls it itself, before it builds what checks `ACTIVE`)."""
    global _FAULTS, ACTIVE, _RANK, _RNG
    _FAULTS, _RANK = parse(spec), rank
    ACTIVE, _RNG = bool(_FAULTS), random.Random(rank * 7919 + 1)


configure(os.environ.get("PIVOT_FAULTS", ""), int(os.environ.get("RANK", "0")))


def happens(where: str, role: str) -> int:
    """The call's number if PIVOT_FAULTS asks for a fault at this call, else 0."""
    for fault in _FAULTS:
        if fault.where != where or fault.role not in (role, "*") or fault.rank not in (-1, _RANK):
            continue
        fault.calls += 1
        if fault.calls == fault.at or (fault.probability and _RNG.random() < fault.probability):
            return fault.calls
    return 0


def inject(where: str, role: str) -> None:
    """Raise `InjectedFault` if PIVOT_FAULTS asks for a fault at this call."""
    if call := happens(where, role):
        raise InjectedFault(f"injected fault: {where} of {role}, call {call}")
