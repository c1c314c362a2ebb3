"""A rank's start-up, shared by every rank, in the order `run` goes through it: the job's config,
distributed init, slots and groups; the inputs every rank agrees on (run folder, checkpoints,
model folders; checked in pivot/runtime/job/inputs.py); GPS and the weight service; rank 0's
controller; this rank's roles; the worker loop; the way out. Each resource is held, from the
moment it is taken, by one `JobResources` that lets go of it however the job ends
(pivot/runtime/job/resources.py)."""

from __future__ import annotations

import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from pivot import secret as job_secret
from pivot.bad_input import EXIT_CODE, stop, tell
from pivot.config import PivotConfig
from pivot.dist import ClusterSpec, SlotTable, create_groups, describe, pool_sizes
from pivot.engine import capabilities
from pivot.engine.kv_export import sweep
from pivot.engine.kv_transport import KVPlace
from pivot.gps.shm import shm_path
from pivot.gps.shm_sweep import remove_dead_namespaces
from pivot.gps.store import GPSStore, HostInfo
from pivot.gps.torch_specs import specs_from_checkpoint
from pivot.gps.transfer_plan import LinkProfile
from pivot.model import ModelArgs, load_state_dict
from pivot.roles.inference import InferenceRole
from pivot.roles.training import TrainingRole, TrainingRoleLike
from pivot.runtime.control.control_plane import WorkerEndpoint
from pivot.runtime.job.backend import DeviceBackend
from pivot.runtime.job.controller_thread import ControllerThread, start_controller
from pivot.runtime.job.dist_init import (
    abort_groups,
    destroy_groups,
    init_distributed,
    start_heartbeat,
)
from pivot.runtime.job.inputs import RunInputs, checked_inputs, job_config, too_small_to_shift
from pivot.runtime.job.launcher_watch import launcher_gone, under_torchrun, watch_launcher
from pivot.runtime.job.liveness import Heartbeat
from pivot.runtime.job.rank0_wait import Rank0Failed, run_on_rank0
from pivot.runtime.job.resources import JobResources
from pivot.runtime.job.worker import Worker
from pivot.runtime.records.checkpoint import Checkpointer
from pivot.runtime.records.run_folder import launch_id, mark_started, record_launch
from pivot.runtime.records.summary import run_summary
from pivot.runtime.weights.service import WeightService
from pivot.tiny.task import judge_template_warning


def resolve_device(cfg: PivotConfig) -> str:
    if cfg.cluster.device == "emulated":  # CPU ranks, device time from the backend (pivot/emulate/)
        return "cpu"
    if cfg.cluster.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return cfg.cluster.device


def summary(
    cfg: PivotConfig, spec: ClusterSpec, table: SlotTable, device: str, attempt: int = 0
) -> str:
    again = f", attempt {attempt} (restarted)" if attempt else ""  # the number every host agreed on
    return "\n".join(
        [
            f"pivot: preset {cfg.preset}, mode {cfg.cluster.mode}, "
            f"planner {cfg.planner.strategy}, device {device}{again}",
            describe(spec, table),
            f"  policy {cfg.model.policy or '<embedded tiny>'} (rollout TP{cfg.rollout.tp}), "
            f"genrm {cfg.model.genrm or '<embedded tiny>'} (reward TP{cfg.reward.tp}), "
            f"training pool {cfg.train.devices}",
        ]
    )


def resume_hint(ckpt: Checkpointer) -> str:
    """Where a stopped run can go on from, and how (one line): its folder named, since a launch
    without --log.dir starts a new run folder (pivot/runtime/records/run_folder.py)."""
    newest = ckpt.newest()
    where = (
        f"the newest checkpoint is {newest}"
        if newest
        else f"no checkpoint was written yet (in {ckpt.dir})"
    )
    again = f"--log.dir {ckpt.run_dir}"
    if ckpt.dir != ckpt.run_dir / "checkpoints":
        again += f" --checkpoint.dir {ckpt.dir}"
    return f"pivot: {where}; relaunch with {again} --checkpoint.resume auto to continue"


def _stopped(ckpt: Checkpointer) -> None:
    """Rank 0's last word on a SIGTERM (torchrun's when a rank fails, a cancelled job's, or its
    own when its launcher died), once the job's resources are let go of: what happened and how
    to go on (pivot/runtime/job/sigterm.py ends the process)."""
    if launcher_gone():
        why = "its launcher (torchrun) is gone, killed or crashed; every rank ends with it."
    elif under_torchrun():
        why = (
            "stopped by torchrun: another rank failed (torchrun names it: 'rank: N ... "
            "exitcode'), or the job was cancelled."
        )
    else:
        why = "stopped by a SIGTERM (the job was cancelled)."
    restart = (
        " (with torchrun --max-restarts N and --checkpoint.resume auto this happens automatically)"
        if under_torchrun() and not launcher_gone()
        else ""
    )
    tell(f"\npivot: {why}\n{resume_hint(ckpt)}{restart}.")


def gps_store(cfg: PivotConfig, spec: ClusterSpec, store: dist.Store, run_id: str) -> GPSStore:
    """This rank's view of GPS, the host-memory store both models' weights travel through."""
    # GPS's names carry the attempt all ranks agreed on (pivot/runtime/job/attempt.py), never a
    # dead attempt's. Attempts (of this job or any other) whose GPS creator died left two copies
    # of each model in /dev/shm: whichever job starts next on the host removes them.
    if spec.local_rank == 0:
        remove_dead_namespaces()
    host_of = tuple(spec.host_of(r) for r in range(spec.world_size))
    return GPSStore(
        store,
        HostInfo(spec.rank, spec.host, spec.local_rank, host_of),
        namespace=f"pivot-{run_id}",
        profile=LinkProfile(remote_bw=cfg.cluster.network_gb_s * 1e9),
        local_first=cfg.cluster.gps_local_first,
    )


def weight_service(
    inputs: RunInputs, gps: GPSStore, table: SlotTable, device: str
) -> WeightService:
    cfg = inputs.cfg
    # every rank needs the tensor list, only rank 0 the tensors: read headers, not weights
    specs = {
        "policy": specs_from_checkpoint(inputs.policy_weights),
        "genrm": specs_from_checkpoint(inputs.genrm),
    }
    served_whole = frozenset(  # by an engine that shards the model itself
        r
        for r, c in (("rollout", cfg.rollout), ("reward", cfg.reward))
        if capabilities(c.engine.backend).reads_whole_model
    )
    return WeightService(
        gps,
        specs,
        gps.info.host_of,
        table.train,
        inputs.start.step,
        device,
        cfg.cluster.host_memory_gb,
        verify=cfg.log.verify_weights,
        dtype=cfg.model.dtype,
        whole=served_whole,
    )


def inference_roles(
    inputs: RunInputs, spec: ClusterSpec, device: str, kv_prefix: str, kv_place: KVPlace
) -> dict[str, InferenceRole]:
    """This rank's rollout and reward roles: each serves its model when its slot is active."""
    cfg = inputs.cfg
    return {
        role: InferenceRole(
            role=role,
            model_path=path,
            engine_cfg=rcfg.engine,
            model_cfg=cfg.model,
            device=device,
            seed=cfg.seed + spec.rank,
            local_device=spec.local_rank,
            kv_prefix=kv_prefix,
            kv_place=kv_place,
        )
        for role, path, rcfg in (
            ("rollout", inputs.policy, cfg.rollout),
            ("reward", inputs.genrm, cfg.reward),
        )
    }


def training_role(
    inputs: RunInputs, spec: ClusterSpec, table: SlotTable, groups: dict[str, Any], device: str
) -> TrainingRole:
    cfg = inputs.cfg
    return TrainingRole(
        args=ModelArgs.load(inputs.policy),
        group=groups[table.train.name] if spec.rank in table.train.ranks else None,
        train=cfg.train,
        model=cfg.model,
        device=device,
        temperature=cfg.rollout.temperature,
        # the initial policy, not a resumed checkpoint: the KL loss's reference, and the folder
        # whose tokenizer and chat template each exported policy carries
        policy=inputs.policy,
        resume_from=inputs.start.checkpoint,
    )


def run(cfg: PivotConfig, backend: DeviceBackend | None = None) -> int:
    """Every rank's job; `backend` stands in for the devices (pivot/main.py picks it), None = real
    ones. What the job takes, `job` holds from the moment it is taken, and lets go of however
    the job ends (pivot/runtime/job/resources.py)."""
    if cfg.cluster.device == "emulated" and backend is None:
        raise ValueError(
            "cluster.device=emulated needs the emulation backend (pivot/main.py hands it to run)"
        )
    watch_launcher()  # a rank torchrun started ends when torchrun does, whatever killed it
    spec = ClusterSpec.from_env()
    device = resolve_device(cfg)
    if spec.rank == 0 and (why := too_small_to_shift(cfg, spec.world_size)):
        tell(why)
    cfg = job_config(cfg, spec, backend)
    table = SlotTable.build(spec, cfg.rollout.tp, cfg.reward.tp, cfg.train.pool)
    try:  # before any model is loaded: a multi-node run without PIVOT_JOB_SECRET stops here
        job_secret.require_for(spec.nnodes)
    except ValueError as e:  # one line per host
        return stop([f"pivot: cannot start: {e}"], spec.rank, speak=spec.local_rank == 0)
    with JobResources() as job:
        attempt = init_distributed(device, spec)
        job.hold("process groups", clean=destroy_groups, failed=abort_groups)
        heartbeat = start_heartbeat(cfg.cluster, spec, attempt, on_dead=job.end_now)
        if heartbeat is not None:  # none may take another's exit for death once the job ends
            job.hold("heartbeat", clean=heartbeat.stop, failed=heartbeat.stop)
        # a training slot sized by measurement may take any pool size: each has its group
        sized = cfg.train.resize_every > 0 and cfg.cluster.mode == "pivot"
        sizes = pool_sizes(spec.world_size, spec.local_world_size, cfg.rollout.tp) if sized else []
        groups = create_groups(table, sizes)
        if spec.rank == 0:
            print(summary(cfg, spec, table, device, attempt), flush=True)
            if warning := judge_template_warning(cfg):
                tell(warning)
        store = dist.distributed_c10d._get_default_store()
        launch = launch_id(store) if spec.rank == 0 else ""  # only rank 0 chooses the folder
        try:  # the same answer on every rank: all stop, rank 0 says why
            inputs = checked_inputs(cfg, spec, launch, job)
        except (OSError, ValueError) as e:
            return _cannot_start(f"pivot: cannot start: {e}", spec.rank, job, said=False)
        cfg, ckpt = inputs.cfg, inputs.checkpointer
        if spec.rank == 0:
            job.say_on_sigterm(lambda: _stopped(ckpt))
        run_id = f"{os.environ.get('TORCHELASTIC_RUN_ID', 'local')}-{attempt}"
        gps = gps_store(cfg, spec, store, run_id)
        # two copies of each model in host memory: a failing or stopped job unlinks this
        # attempt's files on this host (local rank 0), K/V exports of migrating sequences too
        job.hold("GPS", clean=gps.close, failed=lambda: _drop(gps), ending=gps.remove_files)
        # migrated sequences' KV waits in host shm beside GPS's buffers (cleaned with them on restart)
        kv_prefix = shm_path(f"pivot-{run_id}", spec.host, "kv") if cfg.planner.kv_migration else ""
        if kv_prefix and spec.local_rank == 0:
            # K/V of sequences nobody resumed (the job ended first); on a failure GPS's go with it
            job.hold("K/V exports", clean=lambda: sweep(kv_prefix))
        weights = weight_service(inputs, gps, table, device)

        def rank0_startup() -> ControllerThread:  # minutes for a large model: no timeout
            weights.publish("policy", load_state_dict(inputs.policy_weights))
            weights.publish("genrm", load_state_dict(inputs.genrm))
            # the dataset is read here: a bad one stops every rank in one line
            controller = start_controller(
                cfg,
                spec=spec,
                table=table,
                store=store,
                policy=inputs.policy,
                genrm=inputs.genrm,
                checkpointer=ckpt,
                start=inputs.start,
                device=device,
                backend=backend,
            )
            # a folder continued from another launch records this one now that it started, and
            # runs/latest names it from now on (a start that failed left both as they were)
            record_launch(Path(cfg.log.dir), launch, datetime.now(UTC), sys.argv)
            if (why := mark_started(Path(cfg.log.dir), inputs.log_dir_given)) is not None:
                print(why, flush=True)
            return controller

        try:  # afterwards the controller's address is in the store and GPS holds both models
            controller = run_on_rank0(
                store,
                spec.rank,
                "startup",
                "loading the models into GPS and starting the controller",
                rank0_startup,
            )
        except Rank0Failed as e:  # rank 0 has said why (pivot/runtime/job/rank0_wait.py)
            return _cannot_start(f"pivot: cannot start: {e}", spec.rank, job, said=True)
        # from here every rank runs the worker loop: a clean end meets at this barrier, the last
        # collective; past it GPS's files and the groups go
        job.hold("the last barrier", clean=lambda: _last_barrier(heartbeat))
        if controller is not None:  # joined on a clean end: it has sent every rank Stop
            job.hold("the controller thread", clean=controller.join)
        # where this rank's exports can be read from (pivot/engine/kv_transport.py): its host's shm,
        # GPS's NIXL agent when the job spans hosts, CUDA IPC on a GPU
        multi_host = len(set(gps.info.host_of)) > 1
        kv_place = KVPlace(
            spec.host,
            str(device).startswith("cuda"),
            gps.link if kv_prefix and multi_host else None,
        )
        inference = inference_roles(inputs, spec, device, kv_prefix, kv_place)
        for role in inference.values():  # production engines run processes (and shm) of their own
            job.hold(f"the {role.role} engines", clean=role.close, failed=role.close)
        trainer = training_role(inputs, spec, table, groups, device)
        driven: TrainingRoleLike = trainer
        if backend is not None:  # wrapped: the roles as the backend's devices run them
            inference, driven = backend.install(cfg, spec, inference, trainer)
        endpoint = WorkerEndpoint(store, spec.rank)
        job.hold("the control plane", clean=endpoint.close, failed=endpoint.close)
        worker = Worker(
            spec=spec,
            table=table,
            groups=groups,
            endpoint=endpoint,
            inference=inference,
            trainer=driven,
            weights=weights,
        )
        worker.run()  # a failure propagates: torchrun stops the other ranks, no barrier to hang in
        return _way_out(cfg, spec, ckpt, controller, backend)


def _last_barrier(heartbeat: Heartbeat | None) -> None:
    """The job's last collective. Past it every rank leaves when it is done, so the heartbeat
    stops at once: a peer gone first is no death."""
    dist.barrier()
    if heartbeat is not None:
        heartbeat.stop()


def _drop(gps: GPSStore) -> None:
    """GPS after a failure: this attempt's files on this host unlinked (local rank 0), then this
    rank's mappings and registrations released."""
    gps.remove_files()
    gps.close()


def _cannot_start(line: str, rank: int, job: JobResources, said: bool) -> int:
    """Bad input every rank agreed on: rank 0 says `line` (at once, unless it `said` it), every
    rank lets go of the job before any ends (none may take another's exit for death), then the
    others linger for rank 0 (pivot/bad_input.py). Returns the exit code."""
    if rank == 0 and not said:
        stop([line], rank)
    job.close()
    if rank == 0 and not said:
        return EXIT_CODE
    return stop([line], rank, speak=False)


def _way_out(
    cfg: PivotConfig,
    spec: ClusterSpec,
    ckpt: Checkpointer,
    controller: ControllerThread | None,
    backend: DeviceBackend | None,
) -> int:
    """After the worker loop's Stop: rank 0 sums the run up; the exit code (1: the controller
    failed). What the job holds is let go of next, on leaving `run`'s `with` block."""
    if backend is not None:  # every rank's records are on disk before rank 0 sums them up
        backend.finish(cfg.log.dir, spec.rank)
        dist.barrier()
    if controller is None:
        return 0
    controller.join()
    status = f"failed: {controller.failed}" if controller.failed else "done"
    extra = backend.summary_lines(cfg.log.dir) if backend is not None else []
    print(run_summary(cfg.log.dir, ckpt.dir, status, extra), flush=True)
    if controller.failed:
        print(resume_hint(ckpt), flush=True)
        return 1
    return 0
