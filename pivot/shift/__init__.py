"""Role shifting, in one place (pure Python): the cluster's replica table and replica states
(table.py), the shift executor's state machine and plan-to-actions translation (executor.py),
and the `Cluster` that the runtime controller and the simulator both hold (cluster.py)."""

from pivot.shift.cluster import Cluster, TrainingStatus
from pivot.shift.executor import Phase, ShiftAction, ShiftExecutor, ShiftHost, plan_actions
from pivot.shift.table import ReplicaStates, ReplicaTable, ShiftError, State

__all__ = [
    "Cluster",
    "Phase",
    "ReplicaStates",
    "ReplicaTable",
    "ShiftAction",
    "ShiftError",
    "ShiftExecutor",
    "ShiftHost",
    "State",
    "TrainingStatus",
    "plan_actions",
]
