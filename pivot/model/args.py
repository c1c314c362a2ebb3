"""The model hyper-parameters, read from and written to a Hugging Face `config.json`."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from pivot.model.names import has_fused_experts
from pivot.model.rope_config import read_rope as _rope

FAMILIES = {
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "llama": "LlamaForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "glm4": "Glm4ForCausalLM",
    # the language model of the vision-language folder; vision (and MTP) weights are not loaded
    "qwen3_5_moe": "Qwen3_5MoeForConditionalGeneration",
}
_MOE_HINTS = ("moe", "mixtral", "deepseek", "qwen3_next")
_MOE_FAMILIES = ("qwen3_moe", "qwen3_5_moe")
_QK_NORM = ("qwen3", "qwen3_moe", "qwen3_5_moe")
# Qwen3.5: gated attention output, zero-centred RMSNorm weights (x * (1 + w)), shared expert
_QWEN35 = ("qwen3_5_moe",)
_LINEAR_FIELDS = (
    "linear_num_key_heads",
    "linear_num_value_heads",
    "linear_key_head_dim",
    "linear_value_head_dim",
    "linear_conv_kernel_dim",
)
# GLM-4: interleaved partial rotary, a norm after attention and after the MLP, fused gate_up_proj
_GLM = ("glm4",)


@dataclasses.dataclass
class ModelArgs:
    family: str  # one of FAMILIES
    vocab_size: int
    hidden_size: int
    intermediate_size: int  # dense MLP width (the MoE families' dense layers too)
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    partial_rotary_factor: float = 1.0  # share of head_dim that is rotated (glm4: 0.5)
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # bias on q/k/v (always on for qwen2)
    qk_norm: bool = False  # RMSNorm on each head of q and k (qwen3, qwen3_moe)
    num_experts: int = 0  # 0: every layer is dense
    num_experts_per_tok: int = 0
    moe_intermediate_size: int = 0
    norm_topk_prob: bool = False  # renormalise the top-k router probabilities to sum to 1
    decoder_sparse_step: int = 1  # layer i is MoE when (i + 1) % step == 0 ...
    mlp_only_layers: list[int] = dataclasses.field(
        default_factory=list
    )  # ... and i is not listed here
    shared_expert_intermediate_size: int = 0  # 0: no shared expert
    # the folder stores each layer's experts fused (`mlp.experts.gate_up_proj` [E, 2I, H] and
    # `mlp.experts.down_proj` [E, H, I]: Qwen3.5 on the hub) instead of one module per expert;
    # not a config.json field: `load` reads it from the folder's tensor names
    fused_experts: bool = False
    # per layer "full_attention" or "linear_attention" (Gated DeltaNet); empty: all full attention
    layer_types: list[str] = dataclasses.field(default_factory=list)
    linear_num_key_heads: int = 0
    linear_num_value_heads: int = 0
    linear_key_head_dim: int = 0
    linear_value_head_dim: int = 0
    linear_conv_kernel_dim: int = 0
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(
                f"model family {self.family!r} is not supported (supported: {', '.join(FAMILIES)})"
            )
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads={self.num_key_value_heads}"
            )
        if not 0 < self.partial_rotary_factor <= 1 or self.rotary_dim < 2 or self.rotary_dim % 2:
            raise ValueError(
                f"partial_rotary_factor={self.partial_rotary_factor} must give an even rotary width "
                f"of at most head_dim={self.head_dim}"
            )
        if self.num_experts and not 0 < self.num_experts_per_tok <= self.num_experts:
            raise ValueError(
                f"num_experts_per_tok={self.num_experts_per_tok} must be in 1..num_experts={self.num_experts}"
            )
        if self.num_experts and self.family not in _MOE_FAMILIES:
            raise ValueError(
                f"num_experts={self.num_experts}: family {self.family!r} has no mixture-of-experts layers"
            )
        if self.num_experts and (self.moe_intermediate_size <= 0 or self.decoder_sparse_step <= 0):
            raise ValueError(
                f"moe_intermediate_size={self.moe_intermediate_size} and "
                f"decoder_sparse_step={self.decoder_sparse_step} must be positive for an MoE model"
            )
        if self.fused_experts and not self.num_experts:
            raise ValueError("fused_experts=True: the model has no experts (num_experts=0)")
        if self.layer_types and len(self.layer_types) != self.num_hidden_layers:
            raise ValueError(
                f"layer_types has {len(self.layer_types)} entries, num_hidden_layers={self.num_hidden_layers}"
            )
        bad = sorted(set(self.layer_types) - {"full_attention", "linear_attention"})
        if bad:
            raise ValueError(
                f"layer_types: {bad[0]!r} is not supported (full_attention, linear_attention)"
            )
        if self.has_linear_attention and self.family not in _QWEN35:
            raise ValueError(f"layer_types: family {self.family!r} has no linear-attention layers")
        linear = (
            self.linear_num_key_heads,
            self.linear_num_value_heads,
            self.linear_key_head_dim,
            self.linear_value_head_dim,
            self.linear_conv_kernel_dim,
        )
        if self.has_linear_attention and (
            min(linear) <= 0 or self.linear_num_value_heads % self.linear_num_key_heads
        ):
            raise ValueError(
                f"linear attention needs positive linear_* sizes and linear_num_value_heads="
                f"{self.linear_num_value_heads} a multiple of linear_num_key_heads={self.linear_num_key_heads}"
            )
        # the family fixes these; keep them consistent so a saved config reloads identically
        if self.family == "qwen2":
            self.attention_bias = True
        if self.family in _QWEN35:
            self.norm_topk_prob = True
        self.qk_norm = self.family in _QK_NORM

    @property
    def eos_ids(self) -> tuple[int, ...]:
        if self.eos_token_id is None:
            return ()
        return (
            tuple(self.eos_token_id)
            if isinstance(self.eos_token_id, list)
            else (self.eos_token_id,)
        )

    @property
    def rotary_dim(self) -> int:
        return int(self.head_dim * self.partial_rotary_factor)

    @property
    def glm_layout(self) -> bool:
        """Interleaved RoPE, post-attention/post-MLP norms and a fused gate_up_proj (GLM-4)."""
        return self.family in _GLM

    @property
    def qwen35_layout(self) -> bool:
        """Gated attention output, zero-centred RMSNorm weights and a shared expert (Qwen3.5)."""
        return self.family in _QWEN35

    @property
    def has_linear_attention(self) -> bool:
        return "linear_attention" in self.layer_types

    def is_linear_attention(self, layer_idx: int) -> bool:
        return bool(self.layer_types) and self.layer_types[layer_idx] == "linear_attention"

    def is_moe_layer(self, layer_idx: int) -> bool:
        return (
            self.num_experts > 0
            and layer_idx not in self.mlp_only_layers
            and (layer_idx + 1) % self.decoder_sparse_step == 0
        )

    @classmethod
    def from_hf(cls, cfg: dict[str, Any], source: str = "config.json") -> ModelArgs:
        model_type = str(cfg.get("model_type", "")).lower()
        archs = cfg.get("architectures") or []
        if model_type in _QWEN35 and isinstance(
            cfg.get("text_config"), dict
        ):  # vision-language folder
            text = cfg["text_config"]
            cfg = {
                **text,
                "tie_word_embeddings": cfg.get(
                    "tie_word_embeddings", text.get("tie_word_embeddings", False)
                ),
            }
        if model_type not in FAMILIES:
            if (
                any(h in model_type for h in _MOE_HINTS)
                or "num_experts" in cfg
                or "num_local_experts" in cfg
            ):
                raise ValueError(
                    f"{source}: mixture-of-experts model (model_type={model_type!r}, architectures={archs}) "
                    f"is not supported by Pivot's embedded model (supported: {', '.join(FAMILIES)})"
                )
            raise ValueError(
                f"{source}: unsupported architecture model_type={model_type!r} architectures={archs} "
                f"(supported: {', '.join(FAMILIES.values())})"
            )
        rope, rope_field = _rope(cfg, source)
        act = cfg.get("hidden_act", "silu")
        if act != "silu":
            raise ValueError(f"{source}: hidden_act={act!r} is not supported (only silu)")
        heads = cfg["num_attention_heads"]
        head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
        # transformers' defaults when the folder does not say
        default_partial = 0.5 if model_type in _GLM else 0.25 if model_type in _QWEN35 else 1.0
        layer_types = list(cfg.get("layer_types") or [])
        if model_type in _QWEN35 and not layer_types:
            every = cfg.get("full_attention_interval", 4)
            layer_types = [
                "full_attention" if (i + 1) % every == 0 else "linear_attention"
                for i in range(cfg["num_hidden_layers"])
            ]
        experts = cfg.get("num_experts", cfg.get("num_local_experts", 0)) or 0
        args = cls(
            family=model_type,
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
            intermediate_size=cfg.get("intermediate_size", 0)
            if model_type in _QWEN35
            else cfg["intermediate_size"],
            num_hidden_layers=cfg["num_hidden_layers"],
            num_attention_heads=heads,
            num_key_value_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=head_dim,
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
            rope_theta=rope.get("rope_theta", cfg.get("rope_theta", 10000.0)),
            partial_rotary_factor=rope.get(
                "partial_rotary_factor", cfg.get("partial_rotary_factor", default_partial)
            ),
            max_position_embeddings=cfg.get("max_position_embeddings", 4096),
            tie_word_embeddings=cfg.get("tie_word_embeddings", False),
            attention_bias=model_type == "qwen2"
            or bool(cfg.get("attention_bias", model_type in _GLM)),
            qk_norm=model_type in _QK_NORM,
            num_experts=experts,
            num_experts_per_tok=cfg.get("num_experts_per_tok", 0) if experts else 0,
            moe_intermediate_size=cfg.get("moe_intermediate_size", 0) if experts else 0,
            norm_topk_prob=bool(cfg.get("norm_topk_prob", False)),
            decoder_sparse_step=cfg.get("decoder_sparse_step", 1),
            mlp_only_layers=list(cfg.get("mlp_only_layers") or []),
            shared_expert_intermediate_size=cfg.get("shared_expert_intermediate_size", 0)
            if experts
            else 0,
            layer_types=layer_types,
            **{k: cfg.get(k, 0) for k in _LINEAR_FIELDS}
            if "linear_attention" in layer_types
            else {},
            bos_token_id=cfg.get("bos_token_id"),
            eos_token_id=cfg.get("eos_token_id"),
            pad_token_id=cfg.get("pad_token_id"),
        )
        section = rope.get("mrope_section")
        if section is not None and sum(section) != args.rotary_dim // 2:
            raise ValueError(
                f"{source}: {rope_field}.mrope_section={section} does not sum to rotary_dim/2="
                f"{args.rotary_dim // 2} (head_dim={head_dim} x partial_rotary_factor)"
            )
        return args

    def to_hf(self, dtype: str = "float32") -> dict[str, Any]:
        if (
            self.qwen35_layout
        ):  # Pivot serves it as a GenRM only, and GenRM weights are never written
            raise ValueError(f"writing a {self.family!r} folder is not supported (load only)")
        rope: dict[str, Any] = {"rope_type": "default", "rope_theta": self.rope_theta}
        if self.partial_rotary_factor != 1.0 or self.glm_layout:
            rope["partial_rotary_factor"] = self.partial_rotary_factor
        cfg: dict[str, Any] = {
            "architectures": [FAMILIES[self.family]],
            "model_type": self.family,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_parameters": rope,
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
            "pad_token_id": self.pad_token_id,
            "torch_dtype": dtype,
            "use_cache": True,
        }
        if "partial_rotary_factor" in rope:  # the hub's configs keep it at the top level
            cfg["partial_rotary_factor"] = self.partial_rotary_factor
        if self.family != "qwen2":
            cfg["attention_bias"] = self.attention_bias
        if self.family == "llama":
            cfg["mlp_bias"] = False
        if self.family == "qwen3_moe":
            cfg.update(
                num_experts=self.num_experts,
                num_experts_per_tok=self.num_experts_per_tok,
                moe_intermediate_size=self.moe_intermediate_size,
                norm_topk_prob=self.norm_topk_prob,
                decoder_sparse_step=self.decoder_sparse_step,
                mlp_only_layers=list(self.mlp_only_layers),
            )
        return cfg

    @classmethod
    def load(cls, path: str | Path) -> ModelArgs:
        """config.json, plus the expert layout the folder's tensor names show (`fused_experts`)."""
        file = Path(path) / "config.json"
        if not file.is_file():
            raise FileNotFoundError(f"{file}: missing (not a Hugging Face model folder?)")
        try:
            cfg = json.loads(file.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{file}: invalid JSON ({e})") from e
        try:
            args = cls.from_hf(cfg, source=str(file))
        except KeyError as e:
            raise ValueError(f"{file}: missing required field {e.args[0]!r}") from e
        if args.num_experts and has_fused_experts(Path(path)):
            args = dataclasses.replace(args, fused_experts=True)
        return args
