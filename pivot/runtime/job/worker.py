"""The SPMD worker loop every rank runs: poll control messages, apply them, do one unit of role
work (one engine step), report. A rank inside a training step blocks only its own loop: the
control plane is asynchronous, never a world-wide collective per tick."""

from __future__ import annotations

import logging
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist

from pivot.dist import ClusterSpec, Slot, SlotTable, fence_name, train_group_name
from pivot.faults import ACTIVE as FAULTS_ACTIVE
from pivot.faults import STALL_S, happens, inject
from pivot.roles.collective_write import PeerWriteFailed
from pivot.roles.inference import InferenceRole
from pivot.runtime.control import messages as m
from pivot.runtime.control import wire
from pivot.runtime.control.control_plane import WorkerEndpoint
from pivot.runtime.records.checkpoint import unwritable
from pivot.runtime.records.manifest import seal

if TYPE_CHECKING:  # annotations only
    from pivot.roles.training import TrainingRoleLike
    from pivot.runtime.weights.service import WeightService

STATS_EVERY_S = 0.1  # the monitor wants stats at least every 200 ms
# messages that call the inference engine: a failure in one is recovered in place
ENGINE_CALLS = (m.Generate, m.AbortSequences, m.UpdateWeights)

log = logging.getLogger(__name__)


class Worker:
    def __init__(
        self,
        *,
        spec: ClusterSpec,
        table: SlotTable,
        groups: dict[str, Any],
        endpoint: WorkerEndpoint,
        inference: dict[str, InferenceRole],
        trainer: TrainingRoleLike,
        weights: WeightService,
    ) -> None:
        """`groups`: every slot's process group by name, made at start-up (`pivot.dist.create_groups`);
        `inference`: this rank's rollout and reward replicas; `trainer`: its training role (each
        maybe a device backend's wrapper); `weights`: its view of GPS."""
        self.spec, self.table, self.groups, self.endpoint = spec, table, groups, endpoint
        self.inference, self.trainer, self.weights = inference, trainer, weights
        self.role: str | None = None  # role held now (None: idle); "train" for the trainer
        self.slot = -1
        self.stopped = False
        self._last_stats = 0.0
        self._later: list[
            object
        ] = []  # a lockstep follower's messages held until it leaves the slot

    def run(self) -> None:
        self.endpoint.send(m.Hello(self.spec.rank, self.spec.host))
        while not self.stopped:
            lockstep, held = self._lockstep(), (self.role, self.slot)
            # an idle rank waits for its next message; a follower in lockstep never does: it waits
            # in the leader's broadcast instead, so an idle replica loops once per leader wait
            busy = self._engine_busy() or (lockstep and not self._leader())
            msgs = self.endpoint.recv_all(timeout_ms=0 if busy or self._later else 20)
            # a follower's held messages wait until it leaves the slot; a leader's (the rest of a
            # batch in which it joined the slot) go out through its next forward
            if self._later and (not lockstep or self._leader()):
                msgs, self._later = self._later + msgs, []
            if lockstep:
                msgs = self._forward(msgs)
            for i, msg in enumerate(msgs):
                try:
                    self.handle(msg)
                except Exception as e:
                    if isinstance(msg, ENGINE_CALLS) and self._recover(e):
                        self.handle(msg)  # again, on what the failed engine left behind
                        continue
                    # report and keep serving: the controller decides
                    self.endpoint.send(
                        m.Failed(
                            self.spec.rank, f"{type(msg).__name__}: {e}\n{traceback.format_exc()}"
                        )
                    )
                    if isinstance(msg, (m.TrainStep, m.ShiftUp)):
                        raise
                if isinstance(msg, m.ShiftUp) and self._lockstep():
                    # joined a replica of several ranks mid-batch: the rest of the batch (a Stop,
                    # a Generate) is slot-wide business, acted on only through the leader's
                    # forward, so every rank of the slot sees it in the same loop. Acting on it
                    # here let a follower stop while its leader waited for it in a broadcast.
                    self._later = msgs[i + 1 :] + self._later
                    break
            if self.stopped:
                break
            # followers mirror every leader step; a rank that just joined a lockstep slot waits
            # for its next loop, where it steps with the rest of the slot
            mirror = lockstep and (self.role, self.slot) == held
            if mirror or (not self._lockstep() and self._engine_busy()):
                role = self._held_role()  # both need a held inference replica
                try:
                    if FAULTS_ACTIVE and self._leader():  # the recovery tests and the soak
                        inject("engine_step", role)
                        if happens("engine_stall", role):
                            time.sleep(STALL_S)
                    outputs = self.inference[role].step()
                except Exception as e:
                    if not self._recover(e):
                        raise
                    outputs = []
                if outputs:
                    self.endpoint.send(m.Finished(self.spec.rank, role, self.slot, outputs))
            self._maybe_stats()

    def _recover(self, error: Exception) -> bool:
        """An engine call of the inference replica this rank holds failed. Where the replica can
        recover in place (`InferenceRole.recovers_in_place`), the role salvages the engine's
        requests with their tokens and holds them; the controller, told, shifts the replica down
        (they continue elsewhere) and builds its engine anew from GPS. False: it cannot, and the
        error goes on as before (the job restarts)."""
        role = self.inference.get(self.role) if self.role is not None else None
        if role is None or role.slot is None or role.slot in role.failed:
            return False
        if not role.recovers_in_place(len(self.table.get(role.role, role.slot).ranks)):
            return False
        text = f"{type(error).__name__}: {error}".splitlines()[0][:500]
        salvaged = role.fail(text)
        self.endpoint.send(m.EngineFailed(self.spec.rank, role.role, role.slot, text, salvaged))
        return True

    def _held_role(self) -> str:
        """The inference role this rank holds a replica of; only asked where it holds one."""
        if self.role is None:
            raise RuntimeError(f"rank {self.spec.rank} holds no inference replica")
        return self.role

    def _lockstep(self) -> bool:
        """A replica over several ranks runs in lockstep: each loop the leader broadcasts the
        slot-wide control messages (shift down, weight update, stop) it received, then every
        rank runs the same engine step (the engine broadcasts the leader's step plan)."""
        return self.role in self.inference and len(self.table.get(self.role, self.slot).ranks) > 1

    def _forward(self, msgs: list[object]) -> list[object]:
        slot_wide: tuple[type, ...] = (m.ShiftDown, m.UpdateWeights, m.Stop)
        role = self._held_role()
        if self.inference[role].kv_migration:  # every rank exports / imports its own KV slice
            slot_wide += (m.Generate, m.AbortSequences)
        group = self.groups[self.table.get(role, self.slot).name]
        if self._leader():
            data = torch.frombuffer(
                bytearray(wire.encode_many([msg for msg in msgs if isinstance(msg, slot_wide)])),
                dtype=torch.uint8,
            )
            size = torch.tensor([data.numel()], dtype=torch.int64)
        else:
            # a follower acts on slot-wide messages only as the leader forwards them (its own
            # copy of a Stop is dropped); anything else (its next ShiftUp) waits until the
            # forwarded ShiftDown has taken it out of the slot
            self._later += [msg for msg in msgs if not isinstance(msg, slot_wide)]
            size = torch.zeros(1, dtype=torch.int64)
        # typed bytes (the wire codec), not broadcast_object_list: nothing here is unpickled
        dist.broadcast(size, group_src=0, group=group)
        if not self._leader():
            data = torch.empty(int(size), dtype=torch.uint8)
        dist.broadcast(data, group_src=0, group=group)
        if self._leader():
            return msgs
        return list(wire.decode_many(data.numpy().tobytes()))

    def _engine_busy(self) -> bool:
        return self.role in self.inference and self.inference[self.role].has_work()

    def _leader(self) -> bool:
        return (
            self.role is not None and self.table.get(self.role, self.slot).leader == self.spec.rank
        )

    def _maybe_stats(self, force: bool = False) -> None:
        now = time.monotonic()
        if self.role not in self.inference or not self._leader():
            return
        if force or now - self._last_stats >= STATS_EVERY_S:
            stats, progress = self.inference[self.role].stats()
            self.endpoint.send(
                m.Stats(self.spec.rank, self.role, self.slot, stats, time.time(), progress)
            )
            self._last_stats = now

    def handle(self, msg: object) -> None:
        rank = self.spec.rank
        if isinstance(msg, m.Generate):
            self.inference[self._held_role()].add(msg.requests)
        elif isinstance(msg, m.AbortSequences):
            role = self._held_role()
            result = self.inference[role].abort(msg.ids)
            if self._leader():  # a follower (KV migration forwards aborts) only wrote its KV slice
                self.endpoint.send(m.Aborted(rank, role, self.slot, list(result)))
        elif isinstance(msg, m.ShiftDown):
            self._shift_down(msg)
        elif isinstance(msg, m.ShiftUp):
            self._shift_up(msg)
        elif isinstance(msg, m.UpdateWeights):
            t0 = time.perf_counter()
            slot = self.table.get("rollout", msg.slot)
            version, _ = self.inference["rollout"].update_weights(
                lambda out: self._read_told("policy", slot, msg.version, out)
            )
            self.endpoint.send(m.WeightsUpdated(rank, msg.slot, version, time.perf_counter() - t0))
        elif isinstance(msg, m.TrainStep):
            t0 = time.perf_counter()
            metrics = self.trainer.train_step(msg.batch)
            t1 = time.perf_counter()
            version = self.weights.write_policy(
                self.trainer.shards(), self._train_group(self.table.train)
            )
            metrics.update(compute_s=t1 - t0, gps_write_s=time.perf_counter() - t1)
            self.endpoint.send(m.Trained(rank, msg.step, version, metrics))
        elif isinstance(msg, m.SaveCheckpoint):
            try:
                files = seal(self.trainer.save(msg.path), Path(msg.path))  # the manifest lists them
            except PeerWriteFailed:
                return  # the rank that could not write says why; the controller stops the job
            except OSError as e:  # a full disk or a lost mount: the user's to fix, not a bug
                self.endpoint.send(m.Failed(rank, f"SaveCheckpoint: {unwritable(msg.path, e)}"))
                return
            self.endpoint.send(m.Saved(rank, msg.step, files))
        elif isinstance(msg, m.ResizeTraining):
            self._resize_training(msg)
        elif isinstance(msg, m.Stop):
            self.stopped = True
        else:
            raise TypeError(f"unknown control message {msg!r}")

    def _resize_training(self, msg: m.ResizeTraining) -> None:
        """The training slot moves to `msg.ranks` (the trainer is down): every rank learns the
        slot, GPS's writer layout follows it, and the old trainer is dropped; a rank of the new
        slot builds one on its next shift up."""
        assert self.role != "train", f"rank {self.spec.rank} still trains: the slot cannot move"
        self.table.train = Slot("train", 0, tuple(msg.ranks))
        self.weights.resize_training(self.table.train)
        self.trainer.resize(Path(msg.checkpoint) if msg.checkpoint else None)

    def _train_group(self, slot: Slot) -> dist.ProcessGroup:
        """The training slot's process group: made at start-up for every size it may take
        (`pivot.dist.create_groups`), since a group made later by its ranks alone hangs unless
        each made the same groups before."""
        return self.groups[train_group_name(slot.ranks)]

    def _shift_down(self, msg: m.ShiftDown) -> None:
        assert (self.role, self.slot) == (msg.role, msg.slot), (
            f"rank {self.spec.rank} holds {self.role}{self.slot}, not {msg.role}{msg.slot}"
        )
        if msg.role == "train":
            phases = self.trainer.shift_down()
            partials: list = []
        else:
            fence = self.groups.get(fence_name(self.table.get(msg.role, msg.slot)))
            try:
                result, phases = self.inference[msg.role].shift_down(fence)
            except Exception as e:  # the engine failed in its release: hand back what it held
                if not self._recover(e):
                    raise
                result, phases = self.inference[msg.role].shift_down(fence)
            partials = list(result)
        self.role, self.slot = None, -1  # leave the slot's sub-communicator
        self.endpoint.send(
            m.ShiftDone(self.spec.rank, msg.role, msg.slot, False, -1, phases, partials=partials)
        )

    def _read_told(
        self, model: str, slot: Slot, version: int | None, out: dict[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], int]:
        """Read the version the controller named, so every rank of a replica holds the same one;
        if GPS has overwritten it since (two newer Writes), the newest, reported as such: the
        controller sees the replica mixed and updates all of its ranks (`ReplicaVersions`)."""
        try:
            return self.weights.read(model, slot, version, out=out)
        except LookupError as e:
            log.warning("rank %d: %s; reading the newest instead", self.spec.rank, e)
            return self.weights.read(model, slot, None, out=out)

    def _shift_up(self, msg: m.ShiftUp) -> None:
        assert self.role is None, f"rank {self.spec.rank} still holds {self.role}{self.slot}"
        slot = self.table.get(msg.role, msg.slot)
        group = self.groups.get(slot.name)  # the training slot's: `_train_group`
        model = "genrm" if msg.role == "reward" else "policy"
        if msg.role == "train":
            t0 = time.perf_counter()
            group = self._train_group(slot)
            self.trainer.join(group)
            # only the first shift up needs GPS: later ones restore the exact fp32 master kept on
            # host, which a bf16 GPS copy could only be checked against, on the critical path
            tensors, version = (
                self.weights.read(model, slot, None) if self.trainer.needs_weights else (None, -1)
            )
            phases = {"gps_read": time.perf_counter() - t0, **self.trainer.shift_up(tensors)}
            version = self.trainer.version if version < 0 else version
            checksum = 0.0
        else:
            told = msg.version if model == "policy" else None  # the GenRM is never written
            version, phases = self.inference[msg.role].shift_up(
                msg.slot, group, lambda out: self._read_told(model, slot, told, out)
            )
            checksum = self.inference[msg.role].checksum() if self.weights.verify else 0.0
            self.trainer.prewarm()  # a rank of the training pool: its first shift up, prepared
        self.role, self.slot = msg.role, msg.slot  # join the slot's sub-communicator
        self.endpoint.send(
            m.ShiftDone(
                self.spec.rank,
                msg.role,
                msg.slot,
                True,
                version,
                phases,
                checksum=checksum,
                read_bytes=self.weights.last_read_bytes,
                remote_bytes=self.weights.last_remote_bytes,
            )
        )
        self._maybe_stats(force=True)
