"""Builds rank 0's controller from the config and runs it in a background thread, so planning
never stalls rank 0's own role work."""
from __future__ import annotations

import json
import threading
import traceback
from pathlib import Path
from typing import Any

from pivot.config import PivotConfig
from pivot.dist import ClusterSpec, ControllerEndpoint, SlotTable
from pivot.emulate import EmulatedFlow, controller_parts
from pivot.model import TextTokenizer
from pivot.rl.buffer import SampleBuffer
from pivot.rl.data import PromptCursor, load_dataset
from pivot.rl.evaluation import split_heldout
from pivot.runtime.checkpoint import Checkpointer
from pivot.runtime.controller import Controller
from pivot.runtime.flow import RLFlow
from pivot.runtime.metrics import RunLog
from pivot.plan.modes import make_mode
from pivot.runtime.progress import StepProgress
from pivot.sched.throughput import ThroughputModel

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PROFILE = ROOT / "configs" / "throughput_tiny_cpu.json"


def load_profile(path: str) -> ThroughputModel:
    """Fitted A, B, C, D (tools/profile_engine.py); falls back to tiny-CPU magnitudes."""
    file = Path(path) if path else DEFAULT_PROFILE
    if file.is_file():
        c = json.loads(file.read_text())
        return ThroughputModel(c["A"], c["B"], c["C"], c["D"])
    return ThroughputModel(A=2e-6, B=0.01, C=2e-4, D=0.002)


class ControllerThread(threading.Thread):
    def __init__(self, controller: Controller, progress: StepProgress, log: RunLog) -> None:
        super().__init__(name="pivot-controller", daemon=True)
        self.controller, self.progress, self.log = controller, progress, log
        self.failed: str | None = None

    def run(self) -> None:
        try:
            self.controller.run()
            self.failed = self.controller.failed
        except Exception as e:  # the workers must still be told to stop
            self.failed = f"controller: {e}"
            traceback.print_exc()
            self.controller.failed = self.failed
            self.controller.finish()
        finally:
            self.progress.close()
            self.log.close()


def start_controller(
    cfg: PivotConfig, spec: ClusterSpec, table: SlotTable, store: Any, policy_path: Path, genrm_path: Path,
    ckpt: Checkpointer, resume: tuple[Path, dict] | None, start_step: int,
) -> ControllerThread:
    endpoint = ControllerEndpoint(store)
    dataset, heldout = split_heldout(cfg.data, cfg.eval, load_dataset(cfg.data, seed=cfg.seed), cfg.seed)
    flow_cls, flow_fields, profile = RLFlow, {}, load_profile(cfg.planner.throughput_profile)
    if cfg.cluster.device == "emulated":  # drawn response lengths, the emulated devices' speeds
        flow_cls = EmulatedFlow
        flow_fields, profile = controller_parts(cfg, spec)
    flow = flow_cls(
        cfg, PromptCursor(dataset, seed=cfg.data.shuffle_seed), TextTokenizer.from_pretrained(policy_path),
        TextTokenizer.from_pretrained(genrm_path), SampleBuffer(cfg.train.group_size, cfg.train.staleness),
        cfg.train.staleness, heldout, **flow_fields,
    )
    log = RunLog(cfg.log.dir, cfg.log.tensorboard, start_step if resume is not None else None,
                 cfg.log.wandb_project if cfg.log.wandb else None, _asdict(cfg))
    (Path(cfg.log.dir) / "config.json").write_text(json.dumps(_asdict(cfg), indent=1))
    progress = StepProgress(cfg.train.steps, start_step, cfg.log.progress)
    ctrl = Controller(cfg, table, spec.world_size, endpoint, flow, make_mode(cfg), log, profile, start_step, progress, ckpt)
    if resume is not None:
        ctrl.version = resume[1]["version"]
        for info in flow.load_state_dict(resume[1]):
            ctrl.sched[info.role].submit(info.state())
        log.shift(event="resume", step=start_step, path=str(resume[0]))
    thread = ControllerThread(ctrl, progress, log)
    thread.start()
    return thread


def _asdict(cfg: PivotConfig) -> dict:
    import dataclasses

    return dataclasses.asdict(cfg)
