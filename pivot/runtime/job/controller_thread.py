"""Builds rank 0's controller from the config and runs it in a background thread, so planning
never stalls rank 0's own role work."""

from __future__ import annotations

import dataclasses
import json
import logging
import sys
import threading
import traceback
from pathlib import Path
from typing import Any

from pivot.config import PivotConfig
from pivot.dist import ClusterSpec, SlotTable
from pivot.model import TextTokenizer
from pivot.plan.modes import make_mode
from pivot.rl.buffer import SampleBuffer
from pivot.rl.data import PromptCursor, skipped_rows_line
from pivot.runtime.control.control_plane import ControllerEndpoint, RankGone
from pivot.runtime.control.controller import Controller
from pivot.runtime.control.sizing import SlotSizer, gpu_cost_model
from pivot.runtime.flow.rl_flow import RLFlow
from pivot.runtime.flow.sequences import SequenceShaper
from pivot.runtime.job.backend import DeviceBackend
from pivot.runtime.job.startup_profile import profile_at_startup
from pivot.runtime.records.checkpoint import Checkpointer, StartPoint
from pivot.runtime.records.metrics import RunLog
from pivot.runtime.records.progress import StepProgress
from pivot.sched.profile import ROOT, ReplicaShape, hardware_name, resolve_profile
from pivot.sched.throughput import ThroughputModel
from pivot.sim.autosize import CostModel
from pivot.tiny import task

PROFILE_CACHE = ROOT / ".cache"

log = logging.getLogger(__name__)


def role_profiles(
    cfg: PivotConfig, policy_path: Path, genrm_path: Path, device: str
) -> dict[str, ThroughputModel]:
    """Each inference role's own throughput constants (`pivot.sched.profile.resolve_profile`):
    rollout's of the policy, reward's of the GenRM, each on its replica shape; a model given
    without a profile is profiled on this rank's device first (`startup_profile`) where it can be."""
    out = {}
    for role, rcfg, folder, given in (
        ("rollout", cfg.rollout, policy_path, cfg.model.policy),
        ("reward", cfg.reward, genrm_path, cfg.model.genrm),
    ):
        shape = (
            ReplicaShape(
                str(folder),
                hardware_name(device),
                rcfg.tp,
                cfg.model.dtype,
                cfg.model.attention,
                rcfg.engine.backend,
                rcfg.engine.timing_key(cfg.model.attention, device.startswith("cuda")),
            )
            if given
            else None
        )
        prof = resolve_profile(role, rcfg.throughput_profile, shape, PROFILE_CACHE)
        # resolve_profile falls back to the tiny constants only for a replica shape
        unprofiled = shape if prof.fallback else None
        fitted = (
            profile_at_startup(role, unprofiled, rcfg.engine, cfg.model, device, PROFILE_CACHE)
            if unprofiled is not None
            else None
        )
        if unprofiled is not None and fitted is None and device.startswith("cuda"):
            raise ValueError(  # the tiny CPU constants would make the planner's benefits fiction
                f"{role}: no throughput profile for {folder} on {unprofiled.hardware} (tp={rcfg.tp}, "
                f"{rcfg.engine.backend}) and none could be measured at start-up; give one: "
                f"--{role}.throughput-profile PATH (tools/profile_engine.py writes it)"
            )
        if unprofiled is not None and fitted is None:
            log.warning(
                "%s: no throughput profile for %s on %s (tp=%d, %s); planning with the tiny CPU constants, so "
                "T_i and the planner's benefit are only relative. Give one: --%s.throughput-profile PATH "
                "(tools/profile_engine.py writes it)",
                role,
                folder,
                unprofiled.hardware,
                rcfg.tp,
                rcfg.engine.backend,
                role,
            )
        out[role] = fitted or prof.model
    return out


class ControllerThread(threading.Thread):
    def __init__(self, controller: Controller, progress: StepProgress, log: RunLog) -> None:
        super().__init__(name="pivot-controller", daemon=True)
        self.controller, self.progress, self.log = controller, progress, log
        self.failed: str | None = None

    def run(self) -> None:
        try:
            self.controller.run()
            self.failed = self.controller.failed
        except RankGone as e:  # one line: which rank, where; torchrun names its exit code
            self.failed = str(e)
            print(f"pivot: {e}; ending the job so torchrun can restart it", flush=True)
            self.controller.failed = self.failed
            self.controller.finish()
        except Exception as e:  # the workers must still be told to stop
            self.failed = f"controller: {e}"
            traceback.print_exc()
            self.controller.failed = self.failed
            self.controller.finish()
        finally:
            self.controller.flow.close()  # the tools' thread, if the run has tools
            self.progress.close()
            self.log.close()


def slot_sizer(
    cfg: PivotConfig,
    spec: ClusterSpec,
    device: str,
    backend: DeviceBackend | None,
    profiles: dict[str, ThroughputModel],
) -> SlotSizer | None:
    """The training slot's sizing (`--train.devices auto`, `--train.resize-every`): PivotRL's
    slot on devices the simulator has a cost model of; elsewhere the slot stays, said once."""
    if not cfg.train.resize_every or cfg.cluster.mode != "pivot":
        return None
    if backend is not None:
        model: CostModel | str = backend.cost_model(cfg, spec)
    else:
        model = gpu_cost_model(cfg, spec.world_size, spec.local_world_size, device)
    if isinstance(model, str):
        print(
            f"pivot: the training slot stays at {cfg.train.devices} devices, not sized by "
            f"measurement (--train.resize-every {cfg.train.resize_every}): {model}",
            file=sys.stderr,
            flush=True,
        )
        return None
    return SlotSizer(model, cfg.train, profiles)


def start_controller(
    cfg: PivotConfig,
    *,
    spec: ClusterSpec,
    table: SlotTable,
    store: Any,
    policy: Path,
    genrm: Path,
    checkpointer: Checkpointer,
    start: StartPoint,
    device: str = "cpu",
    backend: DeviceBackend | None = None,
) -> ControllerThread:
    """Rank 0's controller, running: it listens on `store`'s control plane, reads the dataset,
    builds the flow over the two models' tokenizers (`policy`, `genrm`: their folders) and,
    resuming, restores `start`'s state. It takes the whole `cfg`, not one section: the flow,
    the controller and the planner's mode read most sections, and the run's records
    (config.json, the metrics' hyperparameters) hold all of it."""
    endpoint = ControllerEndpoint(store, spec)
    print(
        f"pivot: control plane listening on {endpoint.address} (authenticated frames)", flush=True
    )
    # the task's inputs; where the config names none, the tiny task's (pivot/tiny/task.py)
    train = task.training_set(cfg.data, seed=cfg.seed)
    if (skipped := skipped_rows_line(train)) is not None:  # said once, not only counted
        print(skipped, file=sys.stderr, flush=True)
    dataset, heldout = task.heldout_split(cfg.data, cfg.eval, train, cfg.seed)
    policy_tok = TextTokenizer.from_pretrained(policy)
    shaper: SequenceShaper | None = None
    if backend is not None:  # e.g. emulated: drawn response lengths, the emulated devices' speeds
        shaper, profiles = backend.controller_parts(cfg, spec, policy_tok)
    else:
        profiles = role_profiles(cfg, policy, genrm, device)
    flow = RLFlow(
        cfg,
        PromptCursor(dataset, seed=cfg.data.shuffle_seed),
        policy_tok,
        TextTokenizer.from_pretrained(genrm),
        SampleBuffer(cfg.train.group_size, cfg.train.staleness),
        cfg.train.staleness,
        task.judge_template(cfg.reward),
        heldout,
        shaper=shaper,
    )
    config = dataclasses.asdict(cfg)
    log = RunLog(
        cfg.log.dir,
        cfg.log.tensorboard,
        start.step if start.checkpoint is not None else None,
        cfg.log.wandb_project if cfg.log.wandb else None,
        config,
    )
    (Path(cfg.log.dir) / "config.json").write_text(json.dumps(config, indent=1))
    progress = StepProgress(cfg.train.steps, start.step, cfg.log.progress)
    sizer = slot_sizer(cfg, spec, device, backend, profiles)
    ctrl = Controller(
        cfg,
        table=table,
        world_size=spec.world_size,
        endpoint=endpoint,
        flow=flow,
        mode=make_mode(cfg),
        log=log,
        profiles=profiles,
        start_step=start.step,
        progress=progress,
        checkpointer=checkpointer,
        sizer=sizer,
    )
    if start.checkpoint is not None:
        ctrl.training.version = start.state["version"]
        ctrl.router.submit(flow.load_state_dict(start.state))
        log.shift(event="resume", step=start.step, path=str(start.checkpoint))
    thread = ControllerThread(ctrl, progress, log)
    thread.start()
    return thread
