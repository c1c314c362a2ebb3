"""Configuration sections of the models and of the two inference roles that serve them: which
checkpoints (`ModelConfig`), how the policy samples responses (`RolloutConfig`) and how the GenRM
judges them (`RewardConfig`), each role with its engine section; what the two roles have alike is
the Protocol `InferenceRoleConfig`, and their shared checks `check_inference_role`. Part of the
tree of `pivot.config`, which re-exports every class here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, Literal, Protocol

from pivot.bad_input import check as _check
from pivot.engine.config import EngineConfig


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


class InferenceRoleConfig(Protocol):
    """What the sections of the two inference roles (rollout, reward) have alike, for the code that
    treats either role the same way: the section's name in the tree, the size and count of the
    role's replicas, its longest response, its throughput profile and its engine.

    A Protocol, not a base: each role's section declares these fields itself, because each flag's
    help is its role's own (a rollout replica is tensor-parallel, a GenRM replica TP/EP; each names
    its own tiny throughput profile), and because a base dataclass's fields would come before the
    role's own ones in --help and in --print-config's YAML, where the throughput profile and the
    engine come last (tests/config/test_help_unchanged.py). Their shared checks are
    `check_inference_role`, which each section's `__post_init__` calls first."""

    role: ClassVar[str]
    """The section's name in the tree: its flags are `--{role}.*`, its errors name `{role}.*`."""
    tp: int
    replicas: int
    max_new_tokens: int
    throughput_profile: str
    engine: EngineConfig


def check_inference_role(section: InferenceRoleConfig) -> None:
    """The checks both inference roles' sections share, their errors named after `section.role`."""
    _check(section.tp >= 1, f"{section.role}.tp", section.tp, "must be >= 1")
    _check(section.replicas >= 0, f"{section.role}.replicas", section.replicas, "must be >= 0")
    _check(
        section.max_new_tokens > 0,
        f"{section.role}.max_new_tokens",
        section.max_new_tokens,
        "must be > 0",
    )


@dataclass
class RolloutConfig:
    role: ClassVar[str] = "rollout"
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
        check_inference_role(self)
        _check(self.temperature >= 0, "rollout.temperature", self.temperature, "must be >= 0")
        _check(0 < self.top_p <= 1, "rollout.top_p", self.top_p, "must be in (0, 1]")


@dataclass
class RewardConfig:
    role: ClassVar[str] = "reward"
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
    """Score given when the judge's verdict cannot be parsed, after its retry (counted in metrics:
    count/unparsable_verdicts), or when the judge ran past reward.timeout_s (count/judge_timeouts)."""
    retry_unparsable: bool = True
    """Judge a response once more when the verdict cannot be parsed, sampled at temperature
    max(reward.temperature, 0.6) (a greedy judge would say the same again); counted in
    count/verdict_retries. Its verdict, or the fallback score, is the reward."""
    timeout_s: float = 1800.0
    """Wall-clock budget of one judging, from its first dispatch: a judge still running after it
    is stopped and scored reward.fallback_score (0 = no budget). The token budget is
    reward.max_new_tokens."""
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
        check_inference_role(self)
        _check(
            0 <= self.fallback_score <= 1,
            "reward.fallback_score",
            self.fallback_score,
            "must be in [0, 1]",
        )
        _check(self.timeout_s >= 0, "reward.timeout_s", self.timeout_s, "must be >= 0 (0 = none)")
        _check(
            not (self.judge_template and self.judge_template_file),
            "reward.judge_template_file",
            self.judge_template_file,
            "give either --reward.judge-template or --reward.judge-template-file, not both",
        )
