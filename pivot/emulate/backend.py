"""Emulated accelerators as the runtime's device backend (`pivot.runtime.job.backend.DeviceBackend`):
`pivot/main.py` hands one to the runtime when `--cluster.device emulated`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pivot.config import PivotConfig
from pivot.dist import ClusterSpec
from pivot.emulate import controller_parts, install, runtime_config, tally_lines, write_tally
from pivot.emulate.clock import EmulatedClock
from pivot.emulate.costs import emulated_hardware, paper_config
from pivot.emulate.flow import EmulatedLengths
from pivot.model import TextTokenizer
from pivot.sched.throughput import ThroughputModel
from pivot.sim.autosize import CostModel


class EmulatedDevices:
    """One rank's emulated device: holds the clock its roles' wrappers wait on."""

    def __init__(self) -> None:
        self.clock: EmulatedClock | None = None

    def runtime_config(self, cfg: PivotConfig) -> PivotConfig:
        return runtime_config(cfg)

    def controller_parts(
        self, cfg: PivotConfig, spec: ClusterSpec, policy_tok: TextTokenizer
    ) -> tuple[EmulatedLengths, dict[str, ThroughputModel]]:
        """Drawn response lengths (the flow's shaper) and the emulated devices' speeds."""
        return controller_parts(cfg, spec, policy_tok)

    def cost_model(self, cfg: PivotConfig, spec: ClusterSpec) -> CostModel:
        """The paper-scale job on the emulated hardware, in the emulation's units."""
        e = cfg.emulate
        paper = paper_config(cfg, spec.world_size, spec.local_world_size)
        return CostModel(paper, emulated_hardware(cfg), e.length_scale, e.time_scale)

    def install(
        self, cfg: PivotConfig, spec: ClusterSpec, inference: dict[str, Any], trainer: Any
    ) -> tuple[dict[str, Any], Any]:
        inference, trainer, self.clock = install(cfg, spec, inference, trainer)
        return inference, trainer

    def finish(self, run_dir: str, rank: int) -> None:
        if self.clock is not None:  # this rank's device time, for rank 0's summary
            write_tally(run_dir, rank, self.clock)

    def summary_lines(self, run_dir: str | Path) -> list[str]:
        return tally_lines(run_dir)
