"""Configuration sections of training: the RL update (`TrainConfig`), the prompts it trains on
(`DataConfig`) and the held-out accuracy measured along the way (`EvalConfig`). Part of the tree
of `pivot.config`, which re-exports every class here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pivot.bad_input import check as _check

UNKNOWN_DEVICE_MICRO_BATCH = 4096
"""train.micro_batch_tokens auto where the device memory is unknown (CPU)."""


@dataclass
class TrainConfig:
    devices: int | Literal["auto"] = 1
    """Training pool size in devices (training shifts as a whole: 0 or all of them); 0 with
    devices_share set: that share of the world the launcher started. auto: start there (a
    quarter of the world without a share) and let the run size it by measurement (resize_every)."""
    resize_every: int = 0
    """Size the training slot by measurement (pivot/runtime/control/sizing.py): the simulator's
    deployment search on the costs the run measured picks the slot, at start-up, after step 1
    and then every this many steps, and the slot is re-sized at a step boundary when the pick
    beats it by resize_gain. 0 = never; devices auto makes it 5 where it is 0. Needs a cost
    model of the devices: emulated ones, or GPUs the simulator has a profile of."""
    resize_gain: float = 0.05
    """Least predicted gain in tokens/s that re-sizes the slot (a re-size costs a checkpoint)."""
    sizing_budget_s: float = 900.0
    """CPU seconds one sizing search may spend on rank 0 (checked before each candidate run).
    Complete searches of the paper's 128-device clusters took 224-820 CPU-s (docs/results.md)."""
    devices_share: float = 0.0
    """The training pool as a share of the world, used when devices is 0 (the paper presets: their
    world is whatever torchrun or sbatch started). Rounded down to a multiple of both inference
    roles' TP, at least one such multiple."""
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
    micro_batch_tokens: int = 0
    """Real tokens in one micro-batch (gradient accumulation splits by it): its rows are packed
    end to end, so padding costs nothing and counts nothing. 0 (auto): the memory plan's largest
    power of two up to 65,536 that fits a training device (pivot/memory/plan.py, shown by
    --dry-run); 4,096 where the device memory is unknown (CPU)."""
    compile: bool = False
    """torch.compile each decoder layer of the policy (pivot/roles/parallelize.py): RMSNorm,
    rotary, projections and MLP fused, the packed attention between graphs. Equal to eager
    (tests/roles/test_trainer_compile.py); off until a GPU measures what it gains (each rank
    compiles its first steps' shapes: tens of seconds on CPU, where it gains nothing)."""
    logprob_chunk_tokens: int = 1024
    """Response tokens whose logits are made at once (pivot/rl/logprobs.py): the trainer's
    logits peak at this many rows of the vocabulary, whatever the micro-batch's size."""
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
    rollout_is: Literal["token", "sequence"] | None = None
    """Truncated importance sampling of the rollout/trainer mismatch (veRL's `rollout_is`): each
    token's policy-gradient term weighted by min(rho, rollout_is_threshold), rho the trainer's
    over the rollout's probability of the token (token) or of the whole response (sequence).
    With it (or rollout_rs) on, PPO's ratio is taken against the trainer's own log-probs
    (veRL's decoupled mode); pivot/rl/mismatch.py. None = off."""
    rollout_is_threshold: float = 2.0
    """Upper bound of rollout_is's weights (veRL's default, 2.0)."""
    rollout_rs: Literal["token", "sequence"] | None = None
    """Masked importance sampling (veRL's rejection sampling, `rollout_rs`): a token (or the whole
    response) whose rho lies outside [rollout_rs_threshold_lower, rollout_rs_threshold] adds
    nothing to the loss. None = off."""
    rollout_rs_threshold: float | None = None
    """rollout_rs's upper bound; None = rollout_is_threshold (veRL's default)."""
    rollout_rs_threshold_lower: float | None = None
    """rollout_rs's lower bound; None = 1 / the upper bound (veRL's default)."""
    beta1: float = 0.9
    """AdamW beta1."""
    beta2: float = 0.999
    """AdamW beta2."""
    normalize_std: bool = True
    """GRPO: divide each group's centred rewards by the group's std."""

    @property
    def pool(self) -> int:
        """`devices` as a count: a config fitted to its world (`PivotConfig.fit_world`) has one."""
        if self.devices == "auto":
            raise ValueError("train.devices=auto: fit the config to its world first (fit_world)")
        return self.devices

    def __post_init__(self) -> None:
        _check(
            self.devices == "auto" or self.devices >= 0,
            "train.devices",
            self.devices,
            "must be >= 0",
        )
        _check(self.resize_every >= 0, "train.resize_every", self.resize_every, "must be >= 0")
        _check(self.resize_gain >= 0, "train.resize_gain", self.resize_gain, "must be >= 0")
        _check(
            self.sizing_budget_s > 0, "train.sizing_budget_s", self.sizing_budget_s, "must be > 0"
        )
        _check(
            0 <= self.devices_share < 1,
            "train.devices_share",
            self.devices_share,
            "must be in [0, 1)",
        )
        _check(
            0 <= self.beta1 < 1 and 0 <= self.beta2 < 1,
            "train.beta1",
            (self.beta1, self.beta2),
            "betas must be in [0, 1)",
        )
        _check(self.staleness >= 0, "train.staleness", self.staleness, "must be >= 0")
        _check(self.filter_groups >= 0, "train.filter_groups", self.filter_groups, "must be >= 0")
        _check(
            self.micro_batch_tokens >= 0,
            "train.micro_batch_tokens",
            self.micro_batch_tokens,
            "must be >= 0 (0: auto, the memory plan's)",
        )
        for name in ("steps", "batch_prompts", "group_size", "logprob_chunk_tokens",
                     "max_bad_steps"):  # fmt: skip
            _check(getattr(self, name) > 0, f"train.{name}", getattr(self, name), "must be > 0")
        _check(
            self.group_size >= 2,
            "train.group_size",
            self.group_size,
            "must be >= 2: GRPO's advantage of a group of one is always zero, nothing is learned",
        )
        _check(self.lr > 0, "train.lr", self.lr, "must be > 0")
        _check(
            self.rollout_is_threshold > 1,
            "train.rollout_is_threshold",
            self.rollout_is_threshold,
            "must be > 1",
        )
        upper = self.rollout_rs_threshold
        _check(upper is None or upper > 1, "train.rollout_rs_threshold", upper, "must be > 1")
        lower = self.rollout_rs_threshold_lower
        _check(
            lower is None or 0 <= lower < (upper or self.rollout_is_threshold),
            "train.rollout_rs_threshold_lower",
            lower,
            "must be >= 0 and below the upper bound",
        )
        _check(
            self.dual_clip_c == 0 or self.dual_clip_c > 1,
            "train.dual_clip_c",
            self.dual_clip_c,
            "must be 0 or > 1",
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
