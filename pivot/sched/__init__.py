"""Shift-aware scheduling (pure Python): throughput model, records, the scheduler."""

from pivot.sched.records import INFERENCE_ROLES, Abort, Command, Dispatch, Replica, Role, SeqState
from pivot.sched.scheduler import ShiftAwareScheduler
from pivot.sched.throughput import ThroughputModel

__all__ = [
    "INFERENCE_ROLES",
    "Abort",
    "Command",
    "Dispatch",
    "Replica",
    "Role",
    "SeqState",
    "ShiftAwareScheduler",
    "ThroughputModel",
]
