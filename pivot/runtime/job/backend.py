"""What the runtime asks of a device backend that stands in for real accelerators.

`pivot/emulate/` is one: CPU ranks that run the real runtime and tiny models but take the device
time of paper-scale models. `pivot/main.py` picks the backend from the config and hands it to
`pivot.runtime.job.launch.run`; the runtime only calls this protocol and never imports a backend,
so the backend may build on the runtime (the emulated lengths are the flow's `SequenceShaper`). Without one (None)
the ranks run on their real devices.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pivot.config import PivotConfig
from pivot.dist import ClusterSpec
from pivot.model import TextTokenizer
from pivot.runtime.flow.sequences import SequenceShaper
from pivot.sched.throughput import ThroughputModel
from pivot.sim.autosize import CostModel

if TYPE_CHECKING:  # annotations only
    from pivot.roles.inference import InferenceRole
    from pivot.roles.training import TrainingRole, TrainingRoleLike


class DeviceBackend(Protocol):
    def runtime_config(self, cfg: PivotConfig) -> PivotConfig:
        """The config every rank runs, derived once from the user's (e.g. engines and planner
        in the backend's units)."""
        ...

    def controller_parts(
        self, cfg: PivotConfig, spec: ClusterSpec, policy_tok: TextTokenizer
    ) -> tuple[SequenceShaper, dict[str, ThroughputModel]]:
        """Rank 0: what the backend changes in the flow's sequences (`policy_tok`: the policy's
        tokenizer) and each inference role's throughput model (instead of the profiled one)."""
        ...

    def cost_model(self, cfg: PivotConfig, spec: ClusterSpec) -> CostModel:
        """Rank 0: the job as the simulator sees it, for the training slot's sizing."""
        ...

    def install(
        self,
        cfg: PivotConfig,
        spec: ClusterSpec,
        inference: dict[str, InferenceRole],
        trainer: TrainingRole,
    ) -> tuple[dict[str, Any], TrainingRoleLike]:
        """This rank's roles as the worker loop drives them (wrappers around the real ones, each
        doing what the role it wraps does)."""
        ...

    def finish(self, run_dir: str, rank: int) -> None:
        """After this rank's worker loop: what the backend records for the run summary, on disk
        before rank 0 reads it (a barrier follows)."""
        ...

    def summary_lines(self, run_dir: str | Path) -> list[str]:
        """Rank 0: the backend's lines in the run summary, read from every rank's records."""
        ...
