"""Role shifting, in one place (pure Python): the cluster's replica table and replica states
(table.py), the shift executor's state machine and plan-to-actions translation (executor.py),
and the host both the runtime controller and the simulator build on (host.py)."""

from pivot.shift.executor import Phase, ShiftAction, ShiftExecutor, ShiftHost, plan_actions
from pivot.shift.host import ClusterHost
from pivot.shift.table import ReplicaStates, ReplicaTable, ShiftError, State

__all__ = [
    "ClusterHost",
    "Phase",
    "ReplicaStates",
    "ReplicaTable",
    "ShiftAction",
    "ShiftError",
    "ShiftExecutor",
    "ShiftHost",
    "State",
    "plan_actions",
]
