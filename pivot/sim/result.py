"""What a simulated run returns: its throughput, step ends, shifts, timeline and the counters
the reports (pivot/sim/report.py) turn into bounds and device-time breakdowns."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

from pivot.plan import ClusterSnapshot, ShiftPlan
from pivot.shift import ReplicaTable
from pivot.sim.costs import SimCosts
from pivot.sim.replica import SimReplica
from pivot.sim.workload import SimSample, Workload


@dataclass(frozen=True)
class TimelinePoint:
    t: float
    devices: dict[str, int]
    rollout_tps: float
    reward_tps: float
    overall_tps: float
    training: bool


@dataclass(frozen=True)
class ShiftEvent:
    t_start: float
    t_end: float
    rid: int
    role: str
    up: bool


@dataclass
class SimResult:
    mode: str
    strategy: str
    preset: str
    hardware: str
    steps: int
    table: ReplicaTable
    costs: SimCosts
    staleness: int
    warmup_steps: int = 0
    """Steps before the measured window (`SimOptions.warmup_steps`)."""
    workload: Workload = field(default_factory=Workload)
    """The workload the samples were drawn from (its shared prefixes price the work bound)."""
    sim_time_s: float = 0.0
    tokens: int = 0
    """Tokens of the measured steps."""
    step_end_s: list[float] = field(default_factory=list)
    train_s: list[float] = field(default_factory=list)
    """Duration of each step's training."""
    num_plans: int = 0
    planner_calls: int = 0
    planner_wall_s: float = 0.0
    wall_s: float = 0.0
    timeline: list[TimelinePoint] = field(default_factory=list)
    shifts: list[ShiftEvent] = field(default_factory=list)
    initial_up: tuple[int, ...] = ()
    """Slots up at t=0."""
    rollout_done: Counter = field(default_factory=Counter)
    reward_done: Counter = field(default_factory=Counter)
    plans: list[tuple[ClusterSnapshot, ShiftPlan | None]] = field(default_factory=list)
    samples: dict[int, list[SimSample]] = field(default_factory=dict)
    busy_s: dict[int, float] = field(default_factory=dict)
    """Seconds each slot computed: decode steps and prefills of a replica, training steps."""
    aborts: int = 0
    """Abort commands of the schedulers (shift down, migration)."""
    preemptions: int = 0
    """Sequences the replicas preempted on a full KV cache (recomputed later)."""
    prefill_tokens: int = 0
    """Tokens prefilled, re-prefills after aborts and preemptions included."""
    prefix_hit_tokens: int = 0
    """Prompt tokens a replica reused from a shared prefix instead of prefilling."""
    kv_moved_tokens: int = 0
    """Tokens whose KV moved with a migrated sequence instead of being re-prefilled (planner.kv_migration)."""
    resized_at_s: list[float] = field(default_factory=list)
    """When the training slot was re-sized (`SimOptions.resizes`); `table` and `costs` are the
    last size's (the measured window's, when the re-sizes fall in the warm-up)."""
    reprefill_tokens: int = 0
    """Of `prefill_tokens`, those of sequences resumed with generated tokens (aborted without
    their KV, or preempted) computed again, and an agentic episode's earlier turns computed again
    when its next turn found its context no longer cached where it landed."""
    tool_calls: int = 0
    """Tool calls of agentic episodes (all steps run)."""
    tool_s: float = 0.0
    """Their summed latency (host time: no device works for them)."""
    resumed_turns: int = 0
    """Agentic turns admitted after a tool call."""
    resume_hits: int = 0
    """Of them, those whose earlier context was still cached on the replica they landed on."""
    context_hit_tokens: int = 0
    """Tokens of those cached contexts reused instead of prefilled."""

    def finish(
        self,
        end_s: float,
        samples: dict[int, list[SimSample]],
        reps: Mapping[int, SimReplica],
        train_rid: int,
        wall_s: float,
    ) -> None:
        """Totals of a run that ended at `end_s` (simulated) after `wall_s` (real) seconds."""
        self.sim_time_s, self.samples, self.wall_s = end_s, samples, wall_s
        self.tokens = sum(
            s.tokens for st in range(self.warmup_steps, self.steps) for s in samples[st]
        )
        self.preemptions = sum(r.preemptions for r in reps.values())
        self.prefill_tokens = sum(r.prefilled for r in reps.values())
        self.prefix_hit_tokens = sum(r.prefix_hits for r in reps.values())
        self.kv_moved_tokens = sum(r.kv_moved for r in reps.values())
        self.reprefill_tokens = sum(r.reprefilled for r in reps.values())
        self.resumed_turns = sum(r.resumes for r in reps.values())
        self.resume_hits = sum(r.resume_hits for r in reps.values())
        self.context_hit_tokens = sum(r.context_hits for r in reps.values())
        self.busy_s = {rid: r.busy_s for rid, r in reps.items()}
        self.busy_s[train_rid] = sum(self.train_s)

    @property
    def window_start_s(self) -> float:
        """Start of the measured window: the end of the last warm-up step (0 without warm-up)."""
        return self.step_end_s[self.warmup_steps - 1] if self.warmup_steps else 0.0

    @property
    def measured_s(self) -> float:
        return self.sim_time_s - self.window_start_s

    @property
    def throughput(self) -> float:
        """Tokens of the measured steps per second of the measured window."""
        return self.tokens / self.measured_s if self.measured_s > 0 else 0.0
