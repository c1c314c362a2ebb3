"""Pivot's configuration: a tree of typed dataclasses exposed on the command line through tyro.

Each field's docstring is its `--help` text. `__post_init__` checks one section on its own;
`PivotConfig.validate(world_size)` checks what needs the whole tree and the world size. Both
raise `ConfigError` naming the field and its value, before any process group exists. Each
component receives only its own section. Named presets live in `configs/presets.py`.

One concern a module, every public name re-exported here (`from pivot.config import ...`):
`tree.py` (the root `PivotConfig` and its whole-tree checks), `roles.py` (model, rollout,
reward), `tools.py` (multi-turn tools), `train.py` (train, data, eval), `cluster.py` (cluster,
planner, emulate, recovery) and `output.py` (log, checkpoint). The engine's section is
`pivot/engine/config.py`'s. The error and its check are `pivot/bad_input.py`'s (the error a user
sees): the engine's section imports them, and the tree imports the engine (`pivot.config` <->
`pivot.engine` would be an import circle, tests/tools/test_import_graph.py).
"""

from __future__ import annotations

from pivot.bad_input import ConfigError as ConfigError
from pivot.bad_input import deferred_checks as deferred_checks
from pivot.config.cluster import ClusterConfig as ClusterConfig
from pivot.config.cluster import EmulateConfig as EmulateConfig
from pivot.config.cluster import Mode as Mode
from pivot.config.cluster import PlannerConfig as PlannerConfig
from pivot.config.cluster import RecoveryConfig as RecoveryConfig
from pivot.config.cluster import Strategy as Strategy
from pivot.config.output import CheckpointConfig as CheckpointConfig
from pivot.config.output import LogConfig as LogConfig
from pivot.config.roles import InferenceRoleConfig as InferenceRoleConfig
from pivot.config.roles import ModelConfig as ModelConfig
from pivot.config.roles import RewardConfig as RewardConfig
from pivot.config.roles import RolloutConfig as RolloutConfig
from pivot.config.tools import ToolsConfig as ToolsConfig
from pivot.config.train import DataConfig as DataConfig
from pivot.config.train import EvalConfig as EvalConfig
from pivot.config.train import TrainConfig as TrainConfig
from pivot.config.tree import PivotConfig as PivotConfig
from pivot.engine.config import EngineConfig as EngineConfig
