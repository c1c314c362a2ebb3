"""Faults injected on purpose, for the recovery tests and the soak (docs/reliability.md).

The environment variable PIVOT_FAULTS lists them, comma-separated, each `where:role:when`:
- where: `engine_step`, the inference engine raises in its step (as a dead vLLM core, an sglang
  scheduler crash or a CUDA OOM in a decode step do);
- role: `rollout`, `reward` or `*`;
- when: a probability per call (`0.01`, drawn from a generator seeded by the rank), or `@N`,
  the N-th call on this rank, once.
Unset (every real run): `inject` returns at once.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field


class InjectedFault(RuntimeError):
    """A fault PIVOT_FAULTS asked for."""


@dataclass
class Fault:
    where: str
    role: str
    probability: float = 0.0
    at: int = 0
    calls: int = field(default=0, compare=False)


def parse(spec: str) -> list[Fault]:
    """PIVOT_FAULTS' faults; ValueError naming the entry it cannot read."""
    out = []
    for entry in filter(None, (e.strip() for e in spec.split(","))):
        parts = entry.split(":")
        if len(parts) != 3:
            raise ValueError(f"PIVOT_FAULTS entry {entry!r}: expected where:role:when")
        where, role, when = parts
        try:
            fault = (
                Fault(where, role, at=int(when[1:]))
                if when.startswith("@")
                else Fault(where, role, probability=float(when))
            )
        except ValueError:
            raise ValueError(f"PIVOT_FAULTS entry {entry!r}: when is a probability or @N") from None
        out.append(fault)
    return out


_FAULTS = parse(os.environ.get("PIVOT_FAULTS", ""))
_RNG = random.Random(int(os.environ.get("RANK", "0")) * 7919 + 1)


def inject(where: str, role: str) -> None:
    """Raise `InjectedFault` if PIVOT_FAULTS asks for a fault at this call."""
    for fault in _FAULTS:
        if fault.where != where or fault.role not in (role, "*"):
            continue
        fault.calls += 1
        if fault.calls == fault.at or (fault.probability and _RNG.random() < fault.probability):
            raise InjectedFault(f"injected fault: {where} of {role}, call {fault.calls}")
