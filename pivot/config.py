"""Pivot's configuration: a tree of typed dataclasses exposed on the command line through tyro.

Each field's docstring is its `--help` text. `__post_init__` checks one section on its own;
`PivotConfig.validate(world_size)` checks what needs the whole tree and the world size. Both
raise `ConfigError` naming the field and its value, before any process group exists. Each
component receives only its own section. Named presets live in `configs/presets.py`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

from pivot.config_check import ConfigError as ConfigError  # re-exported: the tree's error
from pivot.config_check import check as _check
from pivot.config_check import deferred_checks as deferred_checks
from pivot.engine.config import FLASH_BLOCK_MULTIPLE
from pivot.engine.config import EngineConfig as EngineConfig  # the engine's section

Mode = Literal["pivot", "colocated", "disaggregated", "rr_colocated"]
Strategy = Literal["pivot", "static", "rule_based", "chaos"]


@dataclass
class ModelConfig:
    policy: str = ""
    """Policy checkpoint folder (Hugging Face layout). Empty: the embedded tiny policy, built on first use."""
    genrm: str = ""
    """GenRM checkpoint folder (Hugging Face layout). Empty: the embedded tiny GenRM."""
    policy_params_b: float = 0.0
    """Policy size in billions of parameters (presets, simulator); 0 = read from the checkpoint."""
    genrm_params_b: float = 0.0
    """GenRM size in billions of parameters (total, for MoE); 0 = read from the checkpoint."""
    genrm_active_params_b: float = 0.0
    """GenRM parameters active per token (MoE); 0 = same as genrm_params_b."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Parameter dtype of inference and training weights (bfloat16 on GPU clusters)."""
    attention: Literal["sdpa", "flash"] = "sdpa"
    """Attention kernel: torch SDPA (CPU and GPU) or flash-attn (GPU only)."""
    linear: Literal["torch", "te"] = "torch"
    """Linear layers: torch or transformer-engine (GPU only)."""

    def __post_init__(self) -> None:
        for name in ("policy_params_b", "genrm_params_b", "genrm_active_params_b"):
            _check(getattr(self, name) >= 0, f"model.{name}", getattr(self, name), "must be >= 0")
        # flash-attn 2.8.3 has fp16 and bf16 kernels only (flash_attn/flash_attn_interface.py checks q.dtype)
        _check(
            self.attention != "flash" or self.dtype in ("bfloat16", "float16"),
            "model.attention",
            self.attention,
            f"needs --model.dtype bfloat16 or float16 (flash-attn has no {self.dtype} kernels)",
        )


@dataclass
class RolloutConfig:
    tp: int = 1
    """Tensor-parallel size of one rollout replica (devices per replica)."""
    replicas: int = 1
    """Rollout replicas at start (disaggregated/pivot modes)."""
    temperature: float = 1.0
    """Sampling temperature of the policy (0 = greedy)."""
    top_p: float = 1.0
    """Nucleus sampling threshold."""
    top_k: int = 0
    """Top-k sampling (0 = off)."""
    max_new_tokens: int = 96
    """Longest response, in tokens (the paper caps policy responses at 15K)."""
    max_prompt_tokens: int = 64
    """Longest prompt, in tokens; longer prompts are skipped and counted (the paper: 2K)."""
    throughput_profile: str = ""
    """JSON of the fitted throughput constants A, B, C, D of this role's model on its replicas
    (tools/profile_engine.py writes it); empty = the profile cached for this model, hardware and
    TP size, else the embedded tiny model's (configs/throughput_tiny_cpu_rollout.json)."""
    engine: EngineConfig = field(default_factory=EngineConfig)

    def __post_init__(self) -> None:
        _check_role("rollout", self.tp, self.replicas)
        _check(self.temperature >= 0, "rollout.temperature", self.temperature, "must be >= 0")
        _check(0 < self.top_p <= 1, "rollout.top_p", self.top_p, "must be in (0, 1]")
        _check(
            self.max_new_tokens > 0, "rollout.max_new_tokens", self.max_new_tokens, "must be > 0"
        )


@dataclass
class RewardConfig:
    tp: int = 1
    """Tensor-parallel (or TP/EP) size of one GenRM replica."""
    replicas: int = 1
    """GenRM replicas at start (disaggregated/pivot modes)."""
    temperature: float = 0.0
    """GenRM sampling temperature (0 = greedy judge)."""
    max_new_tokens: int = 128
    """Longest judge reasoning, in tokens (the paper caps GenRM responses at 20K; the tiny judge
    writes 18 per column plus 2 zero columns: 94 for three columns)."""
    judge_template: str = ""
    """Judge prompt with {question} and {response}; empty = the tiny task's template."""
    judge_template_file: str = ""
    """Read the judge prompt from this text file instead (same placeholders)."""
    chat_template: bool = True
    """Render the judge prompt with the GenRM's chat template when its folder has one (as one user
    message, generation prompt added); the tiny GenRM has none and reads the raw template."""
    enable_thinking: bool = True
    """Passed to the GenRM's chat template (Qwen3's switch for a reasoning judge); templates that
    do not use it ignore it. The verdict is read after the thinking block."""
    verifier: str = ""
    """Your answer check replacing the built-in one: `module:function` or `path/to/file.py:function`,
    called as function(response, ground_truth), or veRL's compute_score(data_source, solution_str,
    ground_truth, extra_info=None); a float, or a dict whose "score" is the reward and whose other
    keys are logged. `math_verify` = Hugging Face's math-verify. Empty = the DAPO-Math rule."""
    fallback_score: float = 0.0
    """Score given when the judge's verdict cannot be parsed (counted in metrics)."""
    w_verifiable: float = 1.0
    """Weight of the verifiable (answer-checking) reward."""
    w_genrm: float = 1.0
    """Weight of the GenRM reward."""
    throughput_profile: str = ""
    """JSON of the fitted throughput constants A, B, C, D of this role's model on its replicas
    (tools/profile_engine.py writes it); empty = the profile cached for this model, hardware and
    TP size, else the embedded tiny model's (configs/throughput_tiny_cpu_reward.json)."""
    engine: EngineConfig = field(default_factory=EngineConfig)

    def __post_init__(self) -> None:
        _check_role("reward", self.tp, self.replicas)
        _check(
            0 <= self.fallback_score <= 1,
            "reward.fallback_score",
            self.fallback_score,
            "must be in [0, 1]",
        )
        _check(self.max_new_tokens > 0, "reward.max_new_tokens", self.max_new_tokens, "must be > 0")
        _check(
            not (self.judge_template and self.judge_template_file),
            "reward.judge_template_file",
            self.judge_template_file,
            "give either --reward.judge-template or --reward.judge-template-file, not both",
        )


def _check_role(role: str, tp: int, replicas: int) -> None:
    _check(tp >= 1, f"{role}.tp", tp, "must be >= 1")
    _check(replicas >= 0, f"{role}.replicas", replicas, "must be >= 0")


@dataclass
class TrainConfig:
    devices: int = 1
    """Training pool size in devices (training shifts as a whole: 0 or all of them)."""
    steps: int = 12
    """RL steps (policy updates) to run."""
    batch_prompts: int = 8
    """Prompts per RL step (B)."""
    group_size: int = 4
    """Responses per prompt (G), for GRPO group advantages."""
    staleness: int = 2
    """Largest policy-version lag between generating a sample and training on it."""
    lr: float = 2e-5
    """AdamW learning rate."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    grad_clip: float = 1.0
    """Gradient-norm clip."""
    micro_batch_tokens: int = 4096
    """Token budget of one micro-batch (gradient accumulation splits by it)."""
    activation_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward pass instead of keeping them:
    the micro-batch then holds only every layer's input plus one layer's activations (about one
    more forward of compute)."""
    clip_eps_low: float = 0.2
    """PPO ratio clip, lower side."""
    clip_eps_high: float = 0.28
    """PPO ratio clip, upper side (DAPO's clip-higher)."""
    dual_clip_c: float = 0.0
    """Dual-clip constant (> 1 enables it; 0 = off)."""
    kl_coef: float = 0.0
    """KL loss against the initial policy (veRL's `actor.kl_loss_coef` with `use_kl_loss`; 0 =
    off). The reference is the policy folder's weights (not a resumed checkpoint's), FSDP-sharded
    on the training devices beside the policy, frozen; its log-probs cost one forward per
    micro-batch."""
    kl_estimator: Literal["low_var_kl", "kl"] = "low_var_kl"
    """The KL loss's per-token estimator, veRL's `kl_loss_type`: low_var_kl (k3) or kl (k1)."""
    loss_agg: Literal["token", "sequence"] = "token"
    """Loss aggregation: token-level (DAPO) or sequence-level mean."""
    max_bad_steps: int = 3
    """Abort after this many consecutive steps with NaN/inf loss or gradients."""
    filter_groups: int = 0
    """DAPO's dynamic sampling: a group whose G rewards are all equal has zero advantage, so it is
    dropped, up to this many per step (then such groups are kept); 0 = off. A step draws spare
    groups up front, as many as the uniform share of recent groups says it will drop (veRL's
    `gen_batch_size`, sized by measurement), and a fresh prompt only when those fall short;
    spares it does not need are surplus. Dropped and surplus groups are counted, not trained."""
    filter_metric: Literal["reward", "verifiable"] = "reward"
    """What dynamic sampling compares within a group: the reward trained on, or only its verifiable
    part (DAPO's `acc`): with a GenRM whose verdicts are noisy, a group whose answers are all right
    or all wrong otherwise looks mixed and trains on the judge's noise. `verifiable` decides before
    judging: a group's judgings wait for its G responses, and a dropped group is never judged."""
    beta1: float = 0.9
    """AdamW beta1."""
    beta2: float = 0.999
    """AdamW beta2."""
    normalize_std: bool = True
    """GRPO: divide each group's centred rewards by the group's std."""

    def __post_init__(self) -> None:
        _check(self.devices >= 0, "train.devices", self.devices, "must be >= 0")
        _check(
            0 <= self.beta1 < 1 and 0 <= self.beta2 < 1,
            "train.beta1",
            (self.beta1, self.beta2),
            "betas must be in [0, 1)",
        )
        _check(self.staleness >= 0, "train.staleness", self.staleness, "must be >= 0")
        _check(self.filter_groups >= 0, "train.filter_groups", self.filter_groups, "must be >= 0")
        for name in ("steps", "batch_prompts", "group_size", "micro_batch_tokens", "max_bad_steps"):
            _check(getattr(self, name) > 0, f"train.{name}", getattr(self, name), "must be > 0")
        _check(self.lr > 0, "train.lr", self.lr, "must be > 0")
        _check(
            self.dual_clip_c == 0 or self.dual_clip_c > 1,
            "train.dual_clip_c",
            self.dual_clip_c,
            "must be 0 or > 1",
        )


@dataclass
class PlannerConfig:
    strategy: Strategy = "pivot"
    """Shift strategy in pivot mode: the five-step planner, static split, rule-based, or chaos (a
    random valid plan every planner tick, for soak tests: pivot/plan/chaos.py)."""
    horizon_s: float = 60.0
    """H in the benefit B = H * (T_cand - T_cur) - phi, in seconds."""
    tau_shift_s: float = 3.0
    """tau_shift in seconds until a shift bringing a role up has been timed; from then on the
    planner uses the mean measured duration of that role's shifts (pivot/shift/timing.py). A pair's
    penalty is sum (tau_shift + re-prefill time of the replica's KV) * T_i."""
    interval_s: float = 0.5
    """Least time between two planner runs."""
    throughput_model: bool = True
    """Rate replicas with the fitted throughput model; --planner.no-throughput-model is the ablation
    where a replica's throughput is 1 if it has work, else 0."""
    migration: bool = True
    """Migrate running sequences on a shift; --planner.no-migration is the ablation where a shift
    down waits for them and a shift up only drains the queue."""
    kv_migration: bool = False
    """Move an aborted or migrated sequence's KV cache (and linear-attention state) to the replica
    that resumes it, through host shared memory, instead of re-prefilling it (embedded engines;
    sglang replicas re-prefill; a replica that cannot take it re-prefills, counted). The planner
    then prices a shift's aborted sequences at the transfer, not the recompute
    (pivot/engine/kv_export.py, pivot/plan/pairs.py)."""
    kv_refill_share: float = 0.1
    """With kv_migration: what moving an aborted sequence's KV costs as a share of re-prefilling
    it, in a shift pair's penalty. 2 x KV bytes over a ~25 GB/s device-host copy against prefill
    at half of bf16 peak gives 0.02 (7B on H20) to 0.4 (1.5B on H200) (docs/kv_migration.md)."""
    rule_high: float = 0.8
    """Rule-based: shift up a role whose KV utilisation is above this."""
    rule_low: float = 0.1
    """Rule-based: shift down a role whose KV utilisation is below this."""
    max_evaluated: int = 0
    """Most candidates whose migration the planner simulates (step 4); 0: no cap, as the paper
    (every candidate within `budget_s`). Beyond a cap, a coarse-to-fine search over the replica
    count k (geometric spread, then bisection around the best benefit) approximates it."""
    budget_s: float = 0.25
    """Planning-time budget of step 4 in CPU seconds of the planner's thread (0: none). The
    planner simulates every candidate (exact, the paper's step 4) when the measured cost of the
    largest one, times their count, fits; otherwise as many as fit, chosen coarse-to-fine.
    Measured (`tools/bench_planner.py --budget`, docs/results.md): on 60 random 128-device
    snapshots it is exhaustive in all (14 ms CPU median, 49 max), where a cap of 8 chose another
    plan in 17 and lost up to 3.9% of the benefit; at 1024 and 4096 devices it scores 21 of 192
    and 4 of 768 candidates in 0.15-0.17 CPU s. The simulator plans without it (simulated
    time: its search must not depend on the speed of the machine running it)."""
    chaos_seed: int = 0
    """Seed of the chaos strategy's random plans."""

    def __post_init__(self) -> None:
        _check(self.horizon_s > 0, "planner.horizon_s", self.horizon_s, "must be > 0")
        _check(
            self.max_evaluated == 0 or self.max_evaluated >= 2,
            "planner.max_evaluated",
            self.max_evaluated,
            "must be 0 (no cap) or >= 2",
        )
        _check(self.budget_s >= 0, "planner.budget_s", self.budget_s, "must be >= 0")
        _check(
            0 <= self.kv_refill_share <= 1,
            "planner.kv_refill_share",
            self.kv_refill_share,
            "must be in [0, 1]",
        )
        _check(self.interval_s >= 0, "planner.interval_s", self.interval_s, "must be >= 0")
        _check(self.tau_shift_s >= 0, "planner.tau_shift_s", self.tau_shift_s, "must be >= 0")
        _check(
            0 <= self.rule_low < self.rule_high <= 1,
            "planner.rule_low",
            self.rule_low,
            "need 0 <= rule_low < rule_high <= 1",
        )


@dataclass
class DataConfig:
    path: str = ""
    """DAPO-format dataset (parquet or jsonl). Empty: the built-in synthetic arithmetic set."""
    prompt_key: str = "prompt"
    """Column holding the prompt (plain text or chat messages)."""
    answer_key: str = "reward_model.ground_truth"
    """Column holding the ground-truth answer (dots reach into nested fields)."""
    chat_template: bool = False
    """Render every prompt with the policy's chat template, plain text as one user message (the
    policy must have a template). Without it, a prompt given as chat messages (veRL's layout) goes
    through the policy's chat template when the policy has one, as veRL does; plain text, or any
    prompt for a policy with no template, is fed as its text (`pivot.rl.data`)."""
    raw_prompts: bool = False
    """Feed every prompt as its text, even chat messages to a policy with a chat template."""
    shuffle_seed: int = 0
    """Shuffle seed of the data cursor."""
    synthetic_size: int = 4096
    """Problems in the synthetic set."""
    min_digits: int = 1
    """Synthetic problems: fewest digits per operand."""
    max_digits: int = 3
    """Synthetic problems: most digits per operand (the tiny policy is trained on 1-3)."""

    def __post_init__(self) -> None:
        _check(
            1 <= self.min_digits <= self.max_digits,
            "data.min_digits",
            self.min_digits,
            "need 1 <= min_digits <= max_digits",
        )
        _check(self.synthetic_size > 0, "data.synthetic_size", self.synthetic_size, "must be > 0")
        _check(
            not (self.chat_template and self.raw_prompts),
            "data.raw_prompts",
            self.raw_prompts,
            "give either --data.chat-template or --data.raw-prompts, not both",
        )


@dataclass
class EvalConfig:
    every: int = 10
    """Greedy accuracy of the current policy on a held-out set every K steps, before the first
    step and after the last (verifiable reward only, generated by the rollout replicas); 0 = off."""
    prompts: int = 64
    """Held-out prompts. From --eval.path when given; else the synthetic task's problems that are
    not in the training set; else rows held out of --data.path (at most a tenth of it; never trained on)."""
    path: str = ""
    """Held-out dataset (DAPO format, parquet or jsonl), read with the --data keys."""

    def __post_init__(self) -> None:
        _check(self.every >= 0, "eval.every", self.every, "must be >= 0")
        _check(self.prompts > 0, "eval.prompts", self.prompts, "must be > 0")


@dataclass
class ClusterConfig:
    mode: Mode = "pivot"
    """Deployment: pivot (shiftable), colocated, disaggregated, or rr_colocated (rollout+reward share)."""
    nnodes: int = 0
    """Hosts in the job; 0 = from torchrun's environment."""
    devices_per_node: int = 0
    """Devices (ranks) per host; 0 = from torchrun's environment."""
    device: Literal["auto", "cpu", "cuda", "emulated"] = "auto"
    """Where roles run; auto = cuda when available (NCCL), else cpu (gloo). emulated: CPU ranks
    that run the real runtime and tiny models but take the device time a hardware profile
    predicts for the paper-scale models of --emulate.preset (pivot/emulate/, set by --emulate.*)."""
    gpu_memory_gb: float = 0.0
    """Memory per device in GB (simulator and fit checks); 0 = unknown."""
    host_memory_gb: float = 0.0
    """GPS budget per host in GB; 0 = unlimited (replicate every model on every host). The dry run
    also checks GPS plus the trainer's offloaded state against it."""
    network_gb_s: float = 25.0
    """Bandwidth between hosts that GPS's transfer planner assumes, GB/s (an RDMA NIC's, not
    measured here: docs/multinode.md); it only ranks the hosts a Read may use for what its own
    host lacks."""
    gps_local_first: bool = True
    """GPS Reads come from the reader's own host wherever it holds the slice (replication-first);
    False spreads them over every host's copy by estimated latency."""
    heartbeat_timeout_s: float = 10.0
    """A rank whose heartbeat (one a second, pivot/runtime/liveness.py) stops for this long is
    declared dead: the job ends with one line naming it, so torchrun restarts it; 0 = off."""

    def __post_init__(self) -> None:
        _check(self.gpu_memory_gb >= 0, "cluster.gpu_memory_gb", self.gpu_memory_gb, "must be >= 0")
        _check(self.network_gb_s > 0, "cluster.network_gb_s", self.network_gb_s, "must be > 0")
        _check(
            self.heartbeat_timeout_s == 0 or self.heartbeat_timeout_s >= 3,
            "cluster.heartbeat_timeout_s",
            self.heartbeat_timeout_s,
            "must be 0 (off) or >= 3 (heartbeats are a second apart)",
        )
        _check(
            self.host_memory_gb >= 0, "cluster.host_memory_gb", self.host_memory_gb, "must be >= 0"
        )
        _check(self.nnodes >= 0, "cluster.nnodes", self.nnodes, "must be >= 0")
        _check(
            self.devices_per_node >= 0,
            "cluster.devices_per_node",
            self.devices_per_node,
            "must be >= 0",
        )


@dataclass
class EmulateConfig:
    """Emulated devices (`--cluster.device emulated`, pivot/emulate/); unused on real ones."""

    preset: str = "qwen2.5-7b+qwen3-30b-a3b"
    """The paper preset whose policy and GenRM sizes, engine KV and planner horizon the devices
    emulate."""
    hardware: Literal["h20", "h200"] = "h20"
    """The hardware profile of pivot/sim/hardware.py whose costs the devices take."""
    corner: Literal["nominal", "slow", "fast"] = "nominal"
    """That profile as it is, or at the slow or fast end of every cost-model parameter's range
    (pivot/sim/band.py): a figure measured at both ends carries the model's sensitivity band."""
    time_scale: float = 0.01
    """Wall seconds per emulated second (0.01: a 1,000 s run takes 10 s)."""
    length_scale: int = 100
    """Paper tokens per real token. Responses are drawn from the simulator's workload and divided
    by it; each real engine step stands for this many decode steps."""

    def __post_init__(self) -> None:
        _check(self.time_scale > 0, "emulate.time_scale", self.time_scale, "must be > 0")
        _check(self.length_scale >= 1, "emulate.length_scale", self.length_scale, "must be >= 1")


@dataclass
class LogConfig:
    dir: str = "runs/latest"
    """Run folder: metrics.jsonl, timeline.jsonl, TensorBoard events, plots."""
    tensorboard: bool = True
    """Also write TensorBoard scalars."""
    progress: bool = True
    """Show a progress bar on rank 0."""
    verify_weights: bool = False
    """After every shift up, report a checksum of the replica's weights (tests compare it with GPS)."""
    wandb: bool = False
    """Also log metrics to Weights & Biases (needs `pip install wandb`; offline unless WANDB_MODE says otherwise)."""
    wandb_project: str = "pivot"
    """Weights & Biases project name."""


@dataclass
class CheckpointConfig:
    dir: str = ""
    """Checkpoint folder; empty = <log.dir>/checkpoints."""
    every: int = 4
    """Save every K steps (0 = only at the end)."""
    resume: Literal["no", "yes", "auto"] = "no"
    """Continue from the newest complete checkpoint in the folder: no (start fresh; another run's
    checkpoints there are moved to <dir>.old-N), yes (fail without one; a bare --checkpoint.resume
    means yes), auto (resume if there is one, else start fresh: what the launch scripts pass, so
    torchrun --max-restarts recovers from a dead rank). Damaged checkpoints are skipped."""

    def __post_init__(self) -> None:
        _check(self.every >= 0, "checkpoint.every", self.every, "must be >= 0")


@dataclass
class PivotConfig:
    preset: str = "tiny-cpu"
    """The preset these values started from (set with --preset before other flags)."""
    seed: int = 0
    """Seed of data order, sampling and initialisation."""
    dry_run: bool = False
    """Print the memory plan (per role and device, per host) against cluster.gpu_memory_gb and
    cluster.host_memory_gb, then exit (2 if something does not fit). No torchrun, no GPU: the
    cluster is cluster.nnodes x cluster.devices_per_node."""
    model: ModelConfig = field(default_factory=ModelConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    reward: RewardConfig = field(default_factory=RewardConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    planner: PlannerConfig = field(default_factory=PlannerConfig)
    data: DataConfig = field(default_factory=DataConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    cluster: ClusterConfig = field(default_factory=ClusterConfig)
    emulate: EmulateConfig = field(default_factory=EmulateConfig)
    log: LogConfig = field(default_factory=LogConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)

    def __post_init__(self) -> None:
        served = [
            f"{r} served by {c.engine.backend}"
            for r, c in (("rollout", self.rollout), ("reward", self.reward))
            if c.engine.backend != "embedded"
        ]
        # sglang 0.5.23: no get_weights_by_name for Qwen2/Qwen3/Qwen3-MoE/GLM-4, TP shards for Llama
        # (pivot/engine/sglang_adapter.py WHOLE_WEIGHTS_BY_NAME); vLLM repacks weights for its kernels
        _check(
            not (self.log.verify_weights and served),
            "log.verify_weights",
            self.log.verify_weights,
            f"{' and '.join(served)}, which cannot hand back whole weights to checksum",
        )
        for role, engine in (("rollout", self.rollout.engine), ("reward", self.reward.engine)):
            size = engine.kv_block_size(self.model.attention)
            _check(
                self.model.attention != "flash" or size % FLASH_BLOCK_MULTIPLE == 0,
                f"{role}.engine.block_size",
                size,
                f"flash attention's paged KV needs a multiple of {FLASH_BLOCK_MULTIPLE} (or 0 for the default)",
            )

    def validate(self, world_size: int, local_world_size: int) -> None:
        """Every section's checks, then whole-tree checks against the job's size (torchrun's
        WORLD_SIZE and LOCAL_WORLD_SIZE)."""
        for section in (
            self.model,
            self.rollout,
            self.rollout.engine,
            self.reward,
            self.reward.engine,
            self.train,
            self.planner,
            self.data,
            self.eval,
            self.cluster,
            self.emulate,
            self.checkpoint,
            self,
        ):
            section.__post_init__()
        c = self.cluster
        _check(
            world_size % local_world_size == 0,
            "cluster.devices_per_node",
            local_world_size,
            f"does not divide world size {world_size}",
        )
        if c.devices_per_node:
            _check(
                c.devices_per_node == local_world_size,
                "cluster.devices_per_node",
                c.devices_per_node,
                f"but torchrun started {local_world_size} per node",
            )
        if c.nnodes:
            _check(
                c.nnodes * local_world_size == world_size,
                "cluster.nnodes",
                c.nnodes,
                f"but torchrun started {world_size // local_world_size} nodes",
            )
        self.check_shape(world_size, local_world_size)

    def check_shape(self, world_size: int, devices_per_node: int) -> None:
        """Role sizes against a cluster of `world_size` devices, `devices_per_node` per host."""
        for role, tp in (("rollout", self.rollout.tp), ("reward", self.reward.tp)):
            # a replica either fits inside a host or spans whole hosts
            fits = (
                devices_per_node % tp == 0 if tp <= devices_per_node else tp % devices_per_node == 0
            )
            _check(fits, f"{role}.tp", tp, f"does not divide {devices_per_node} devices per node")
            _check(
                tp <= world_size, f"{role}.tp", tp, f"larger than the world ({world_size} devices)"
            )
        _check(
            self.train.devices <= world_size,
            "train.devices",
            self.train.devices,
            f"training pool larger than the world ({world_size} devices)",
        )
        if self.cluster.mode == "disaggregated":
            used = (
                self.train.devices
                + self.rollout.replicas * self.rollout.tp
                + self.reward.replicas * self.reward.tp
            )
            _check(
                used <= world_size,
                "rollout.replicas",
                self.rollout.replicas,
                f"pools need {used} devices, world has {world_size}",
            )
        if self.cluster.mode in ("disaggregated", "pivot"):
            _check(
                self.rollout.replicas >= 1,
                "rollout.replicas",
                self.rollout.replicas,
                f"mode {self.cluster.mode} needs at least one",
            )
            _check(
                self.reward.replicas >= 1,
                "reward.replicas",
                self.reward.replicas,
                f"mode {self.cluster.mode} needs at least one",
            )
        _check(
            self.planner.strategy == "pivot" or self.cluster.mode == "pivot",
            "planner.strategy",
            self.planner.strategy,
            f"picks shifts in cluster.mode pivot only, not {self.cluster.mode}",
        )

    def replace(self, **sections: object) -> PivotConfig:
        return dataclasses.replace(self, **sections)
