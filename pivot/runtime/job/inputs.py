"""A job's inputs, checked before any rank starts work, the same way on every rank: the config
fitted to the world it runs in (`job_config`, `too_small_to_shift`), then, once the process
groups are up, the run folder, the checkpoint to resume from and the models' folders, checked
against the config (`checked_inputs`: headers only, no weights) into the `RunInputs` every rank
agrees on. `pivot/runtime/job/launch.py` runs the job's phases around them."""

from __future__ import annotations

import dataclasses
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch.distributed as dist

from pivot.config import PivotConfig
from pivot.dist import ClusterSpec
from pivot.memory.context_check import check_context, sized_to_roles
from pivot.memory.fit import with_micro_batch_budget
from pivot.model import TextTokenizer
from pivot.model.hf_folder import check_folder
from pivot.runtime.job.resources import JobResources
from pivot.runtime.records.checkpoint import Checkpointer, StartPoint
from pivot.runtime.records.manifest import MANIFEST
from pivot.runtime.records.manifest import problem as manifest_problem
from pivot.runtime.records.run_folder import make, resolve
from pivot.runtime.records.run_lock import RunLock
from pivot.runtime.records.shared_dir import check_shared
from pivot.tiny.shipped import ensure_tiny_models

if TYPE_CHECKING:  # the device backend's protocol pulls in the RL flow: only its type is needed
    from pivot.runtime.job.backend import DeviceBackend


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunInputs:
    """What every rank agreed on before any model is loaded (`checked_inputs`)."""

    cfg: PivotConfig
    """The job's config, its log.dir the run folder."""
    checkpointer: Checkpointer
    policy: Path
    """The initial policy's folder: its tokenizer and chat template, the KL loss's reference."""
    genrm: Path
    start: StartPoint
    log_dir_given: bool = False
    """The folder came from --log.dir: `runs/latest` never names it."""

    @property
    def policy_weights(self) -> Path:
        """Where the policy's weights are read: the resumed checkpoint's, else the initial ones."""
        return self.start.checkpoint / "policy" if self.start.checkpoint else self.policy


def model_paths(cfg: PivotConfig) -> tuple[Path, Path]:
    """Checkpoint folders of the policy and the GenRM: the embedded tiny ones shipped in
    `pivot/tiny/weights/` (checked against their manifest) where the config names none."""
    if cfg.model.policy and cfg.model.genrm:
        return Path(cfg.model.policy), Path(cfg.model.genrm)
    tiny = ensure_tiny_models()
    return Path(cfg.model.policy or tiny.policy), Path(cfg.model.genrm or tiny.genrm)


def with_run_folder(
    cfg: PivotConfig, spec: ClusterSpec, launch: str
) -> tuple[PivotConfig, RunLock | None]:
    """`cfg` with the folder this run writes into (pivot/runtime/records/run_folder.py) as its log.dir:
    rank 0 decides and makes it, and holds its lock (pivot/runtime/records/run_lock.py: one job
    per folder) from before anything is written into it; every rank gets its answer
    (collective), so the folder is the same on every rank and host; ValueError on every rank
    where the job must not start. Returns the lock too (rank 0's; None elsewhere): the job keeps
    it for as long as it runs."""
    answer = [("", "")]  # (folder, why the job must not start)
    lock: RunLock | None = None
    if spec.rank == 0:
        now = datetime.now(UTC)
        try:
            chosen = resolve(
                cfg.log.dir,
                cfg.checkpoint.dir,
                cfg.checkpoint.resume,
                launch,
                cfg.preset,
                now,
            )
            if not chosen.new:  # an existing folder: nothing is written before the lock is held
                lock = RunLock.acquire(chosen.path, launch)
            made, lines = make(chosen, cfg.checkpoint.dir, launch, cfg.preset, now, sys.argv)
            if lock is None:  # made just now, under a name no other job can take (mkdir)
                lock = RunLock.acquire(made, launch)
            if lines:
                print(lines, flush=True)
            answer[0] = (str(made), "")
        except (OSError, ValueError) as e:
            answer[0] = ("", str(e))
    dist.broadcast_object_list(answer, src=0)
    folder, why = answer[0]
    if why:
        if lock is not None:
            lock.release()
        raise ValueError(why)
    return cfg.replace(log=dataclasses.replace(cfg.log, dir=folder)), lock


def resume_point(
    cfg: PivotConfig, ckpt: Checkpointer, spec: ClusterSpec
) -> tuple[Path, dict] | None:
    """The checkpoint `cfg.checkpoint.resume` asks for, the same on every rank (collective): the
    ranks read the candidate's files back in shares and agree on the first problem any found."""
    mode = cfg.checkpoint.resume

    def say(line: str) -> None:
        if spec.rank == 0:
            print(line, flush=True)

    damaged: list[tuple[Path, str]] = []  # sealed (a manifest) but failing its check

    def problem(path: Path) -> str | None:
        found: list[str | None] = [None] * spec.world_size
        share = manifest_problem(path, (spec.rank, spec.world_size), known[1])
        dist.all_gather_object(found, share)
        why = next((p for p in found if p is not None), None)
        if why is not None and not why.startswith(f"no {MANIFEST}"):
            damaged.append((path, why))
        return why

    # one list: `problem` is collective; with rank 0's launch id, a restart's own checkpoints
    # are not hashed again (pivot/runtime/records/manifest.py)
    # [folders, launch id]: what broadcast_object_list fills in is untyped
    known: list[Any] = [ckpt.folders() if spec.rank == 0 and mode != "no" else [], ckpt.launch]
    dist.broadcast_object_list(known, src=0)
    path = ckpt.first_complete(known[0], problem, say)
    if path is not None:
        return path, ckpt.load(path)
    if mode == "yes":
        raise FileNotFoundError(f"--checkpoint.resume yes: no complete checkpoint in {ckpt.dir}")
    if damaged:  # starting over would empty this run's records and prune its checkpoints
        (newest, why), n = damaged[0], len(damaged)
        raise ValueError(
            f"--checkpoint.resume auto: {n} checkpoint{'s' * (n != 1)} in {ckpt.dir} "
            f"{'are' if n != 1 else 'is'} damaged and none is complete (newest {newest.name}: "
            f"{why}); nothing was changed. Restore one, or start this run over with "
            "--checkpoint.resume no after moving its records away, or give another --log.dir"
        )
    return None


def job_config(cfg: PivotConfig, spec: ClusterSpec, backend: DeviceBackend | None) -> PivotConfig:
    """The config every rank runs: the backend's (in its units), and in colocated mode every role
    on every device with on-policy phases (a copy: the caller's config stays). A world too small
    to hold one replica of each inference role at once (one GPU, `python pivot/main.py`) runs
    colocated: shifting there stranded the job with its only device in one role
    (`too_small_to_shift`)."""
    if backend is not None:
        cfg = backend.runtime_config(cfg)
    if too_small_to_shift(cfg, spec.world_size):
        cfg = cfg.replace(cluster=dataclasses.replace(cfg.cluster, mode="colocated"))
    if cfg.cluster.mode == "colocated":
        cfg = cfg.replace(
            train=dataclasses.replace(cfg.train, devices=spec.world_size, staleness=0)
        )
    return cfg


def too_small_to_shift(cfg: PivotConfig, world: int) -> str:
    """Why a world of `world` devices runs colocated whatever mode was asked ("" when it does
    not): fewer devices than one replica of each inference role (training takes its devices
    from them by shifting, which a world of one replica's devices cannot do without stranding
    them in one role)."""
    need = cfg.rollout.tp + cfg.reward.tp
    if cfg.cluster.mode == "colocated" or world >= need:
        return ""
    return (
        f"pivot: {world} device{'s' * (world != 1)} cannot hold a rollout replica (TP "
        f"{cfg.rollout.tp}) and a reward replica (TP {cfg.reward.tp}) at once: running "
        f"colocated (every role on every device, in turn) instead of --cluster.mode "
        f"{cfg.cluster.mode}"
    )


_CHOSEN: dict[str, Path] = {}
"""This process's run folder once chosen: what a Ctrl-C's hint names (runs/latest moves to it
only once the start succeeded)."""


def chosen_run_dir() -> Path | None:
    return _CHOSEN.get("run_dir")


def checked_inputs(
    cfg: PivotConfig, spec: ClusterSpec, launch: str, job: JobResources
) -> RunInputs:
    """The run folder, the checkpoint to resume from and the models' folders, checked (headers
    only) the same way on every rank (collective); OSError or ValueError on every rank where the
    job must not start. Rank 0's lock on the run folder (one job per folder) is `job`'s from the
    moment it is taken."""
    given_dir = cfg.log.dir
    cfg, lock = with_run_folder(cfg, spec, launch)  # before anything reads or writes log.dir
    if lock is not None:
        job.hold("the run folder's lock", clean=lock.release, failed=lock.release)
    _CHOSEN["run_dir"] = Path(cfg.log.dir)
    ckpt = Checkpointer(cfg.checkpoint, Path(cfg.log.dir), launch)
    policy, genrm = model_paths(cfg)
    check_shared(ckpt.dir, spec)  # before a run that could never resume trains for hours
    resume = resume_point(cfg, ckpt, spec)
    start = StartPoint(*resume) if resume else StartPoint()
    inputs = RunInputs(
        cfg=cfg,
        checkpointer=ckpt,
        policy=policy,
        genrm=genrm,
        start=start,
        log_dir_given=bool(given_dir),
    )
    check_folder(inputs.policy_weights)  # the trainer builds the policy with Pivot's model classes
    # also when sglang or vLLM serves it: GPS holds the GenRM in Pivot's names and shapes, read from this folder
    check_folder(genrm)
    # a role whose longest sequence overruns its model stops here; the others' engines are
    # sized to it (their widest decode graph)
    needs = check_context(cfg, inputs.policy_weights, genrm)
    cfg = with_micro_batch_budget(
        sized_to_roles(cfg, needs), inputs.policy_weights, spec.world_size
    )
    inputs = dataclasses.replace(inputs, cfg=cfg)
    if cfg.data.chat_template and TextTokenizer.from_pretrained(policy).chat_template is None:
        raise ValueError(
            f"data.chat_template=True: {policy} has no chat template "
            "(no chat_template.jinja, none in tokenizer_config.json)"
        )
    return inputs
