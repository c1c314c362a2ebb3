"""The emulated device around the real roles: each wrapper runs the real work (engine step,
training step, shift) and then waits until the device time the hardware profile gives that
work has passed (`EmulatedClock`). Everything else is the wrapped role's own."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch.distributed as dist

from pivot.emulate.clock import EmulatedClock, WorkTally
from pivot.emulate.costs import EmulatedCosts
from pivot.engine import AbortResult, EngineStats, Output, Request
from pivot.roles.inference import InferenceRole

if TYPE_CHECKING:  # annotations only
    import torch

    from pivot.rl.batch import TrainBatch
    from pivot.roles.inference import Read
    from pivot.roles.training import TrainingRole


class EmulatedInference:
    def __init__(self, inner: InferenceRole, costs: EmulatedCosts, clock: EmulatedClock) -> None:
        self.inner, self.costs, self.clock = inner, costs, clock

    def __getattr__(self, name: str) -> Any:  # abort, has_work, stats, update_weights, checksum
        return getattr(self.inner, name)

    def add(self, requests: list[Request]) -> None:
        """Queue requests; KV that migrated sequences bring takes its transfer's device time."""
        role = self.inner.role
        before = self.engine_stats()
        t0 = self.clock.now()
        self.inner.add(requests)
        after = self.engine_stats()
        moved = after.kv_imported_tokens - before.kv_imported_tokens
        if moved:  # a TP follower's counters stay at 0: the leader paces the slot
            self.clock.wait(role, t0, self.costs.kv_transfer_s(role, moved), self.costs.tp(role))
        tally = self.clock.tally.setdefault(role, WorkTally())
        tally.kv_imported_tokens += moved
        tally.kv_fallback_tokens += after.kv_fallback_tokens - before.kv_fallback_tokens

    def step(self) -> list[Output]:
        """One engine step, then its device time: L decode steps of the sequences it advanced
        and the prefill it did. TP followers mirror the leader's steps and are paced by it (their
        engine counts no work: its step costs nothing)."""
        role = self.inner.role
        t0, before = self.clock.now(), self.engine_stats()
        outputs = self.inner.step()
        after = self.engine_stats()
        n_seq = after.n_running + len(outputs)
        tokens = after.running_tokens + sum(len(o.prompt_ids) + len(o.output_ids) for o in outputs)
        prefilled = after.prefill_tokens - before.prefill_tokens
        emulated = self.costs.engine_step_s(role, n_seq, tokens - n_seq, prefilled)
        if emulated > 0:  # an empty step (a lockstep leader with nothing to run) is no device work
            self.clock.wait(role, t0, emulated, self.costs.tp(role))
            tally = self.clock.tally[role]
            tally.prefill_tokens += prefilled
            tally.prefix_hit_tokens += after.prefix_hit_tokens - before.prefix_hit_tokens
            tally.reprefill_tokens += after.reprefill_tokens - before.reprefill_tokens
        return outputs

    def engine_stats(self) -> EngineStats:
        return self.inner.engine.stats()

    def shift_up(
        self, slot: int, group: dist.ProcessGroup | None, read: Read
    ) -> tuple[int, dict[str, float]]:
        t0 = self.clock.now()
        version, phases = self.inner.shift_up(slot, group, read)
        return version, shifted(self.clock, self.costs, self.inner.role, True, t0, phases)

    def shift_down(self, fence: Any = None) -> tuple[AbortResult, dict[str, float]]:
        t0 = self.clock.now()
        partials, phases = self.inner.shift_down(fence)
        return partials, shifted(self.clock, self.costs, self.inner.role, False, t0, phases)


class EmulatedTrainer:
    def __init__(self, inner: TrainingRole, costs: EmulatedCosts, clock: EmulatedClock) -> None:
        self.inner, self.costs, self.clock = inner, costs, clock

    def __getattr__(self, name: str) -> Any:  # shards, save
        return getattr(self.inner, name)

    @property
    def devices(self) -> int:
        """The training slot's size now (the job's sizing may have moved it; a trainer with
        no group yet is on the start-up slot)."""
        group = getattr(self.inner, "group", None)
        return dist.get_world_size(group) if group is not None else self.costs.train_devices

    def train_step(self, batch: TrainBatch) -> dict[str, float]:
        t0 = self.clock.now()
        metrics = self.inner.train_step(batch)
        tokens = sum(len(p) + len(r) for p, r in zip(batch.prompt_ids, batch.response_ids))
        self.clock.wait("train", t0, self.costs.train_step_s(tokens, self.devices))
        return metrics

    def shift_up(self, shards: dict[str, torch.Tensor]) -> dict[str, float]:
        t0 = self.clock.now()
        phases = self.inner.shift_up(shards)
        return shifted(self.clock, self.costs, "train", True, t0, phases, self.devices)

    def shift_down(self) -> dict[str, float]:
        t0 = self.clock.now()
        phases = self.inner.shift_down()
        return shifted(self.clock, self.costs, "train", False, t0, phases, self.devices)


def shifted(
    clock: EmulatedClock,
    costs: EmulatedCosts,
    role: str,
    up: bool,
    t0: float,
    phases: dict[str, float],
    devices: int = 0,
) -> dict[str, float]:
    """Wait out a shift's device time (begun at wall time `t0`; the trainer's on `devices`); its
    phases plus what was emulated."""
    emulated = costs.shift_s(role, up, devices)
    waited = clock.wait("shift", t0, emulated)  # every rank of the slot waits: one device each
    return {**phases, "emulated_s": emulated, "emulated_wait": waited}
