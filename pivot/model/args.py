"""The model hyper-parameters, read from and written to a Hugging Face `config.json`."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

FAMILIES = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "llama": "LlamaForCausalLM"}
_MOE_HINTS = ("moe", "mixtral", "deepseek", "glm4_moe", "qwen3_next")


@dataclasses.dataclass
class ModelArgs:
    family: str  # qwen2 | qwen3 | llama
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # bias on q/k/v (always on for qwen2)
    qk_norm: bool = False  # RMSNorm on each head of q and k (qwen3)
    bos_token_id: int | None = None
    eos_token_id: int | list[int] | None = None
    pad_token_id: int | None = None

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"model family {self.family!r} is not supported (supported: {', '.join(FAMILIES)})")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError(
                f"num_attention_heads={self.num_attention_heads} is not a multiple of "
                f"num_key_value_heads={self.num_key_value_heads}"
            )
        # the family fixes these; keep them consistent so a saved config reloads identically
        if self.family == "qwen2":
            self.attention_bias = True
        self.qk_norm = self.family == "qwen3"

    @property
    def eos_ids(self) -> tuple[int, ...]:
        if self.eos_token_id is None:
            return ()
        return tuple(self.eos_token_id) if isinstance(self.eos_token_id, list) else (self.eos_token_id,)

    def num_params(self) -> int:
        h, i, d = self.hidden_size, self.intermediate_size, self.head_dim
        q, kv = self.num_attention_heads * d, self.num_key_value_heads * d
        attn = h * q + 2 * h * kv + q * h + (q + 2 * kv if self.attention_bias else 0) + (2 * d if self.qk_norm else 0)
        layer = attn + 3 * h * i + 2 * h
        emb = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return self.num_hidden_layers * layer + emb + h

    @classmethod
    def from_hf(cls, cfg: dict[str, Any], source: str = "config.json") -> ModelArgs:
        model_type = str(cfg.get("model_type", "")).lower()
        archs = cfg.get("architectures") or []
        if any(h in model_type for h in _MOE_HINTS) or "num_experts" in cfg or "num_local_experts" in cfg:
            raise ValueError(
                f"{source}: mixture-of-experts model (model_type={model_type!r}, architectures={archs}) "
                "is not supported by Pivot's embedded model yet; use the sglang backend for inference"
            )
        if model_type not in FAMILIES:
            raise ValueError(
                f"{source}: unsupported architecture model_type={model_type!r} architectures={archs} "
                f"(supported: {', '.join(FAMILIES.values())})"
            )
        rope = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type not in ("default", None):
            raise ValueError(f"{source}: rope_type={rope_type!r} is not supported (only default RoPE)")
        heads = cfg["num_attention_heads"]
        head_dim = cfg.get("head_dim") or cfg["hidden_size"] // heads
        return cls(
            family=model_type,
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
            intermediate_size=cfg["intermediate_size"],
            num_hidden_layers=cfg["num_hidden_layers"],
            num_attention_heads=heads,
            num_key_value_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=head_dim,
            rms_norm_eps=cfg.get("rms_norm_eps", 1e-6),
            rope_theta=rope.get("rope_theta", cfg.get("rope_theta", 10000.0)),
            max_position_embeddings=cfg.get("max_position_embeddings", 4096),
            tie_word_embeddings=cfg.get("tie_word_embeddings", False),
            attention_bias=model_type == "qwen2" or bool(cfg.get("attention_bias", False)),
            qk_norm=model_type == "qwen3",
            bos_token_id=cfg.get("bos_token_id"),
            eos_token_id=cfg.get("eos_token_id"),
            pad_token_id=cfg.get("pad_token_id"),
        )

    def to_hf(self, dtype: str = "float32") -> dict[str, Any]:
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
            "rope_parameters": {"rope_type": "default", "rope_theta": self.rope_theta},
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
            "pad_token_id": self.pad_token_id,
            "torch_dtype": dtype,
            "use_cache": True,
        }
        if self.family != "qwen2":
            cfg["attention_bias"] = self.attention_bias
        if self.family == "llama":
            cfg["mlp_bias"] = False
        return cfg

    @classmethod
    def load(cls, path: str | Path) -> ModelArgs:
        file = Path(path) / "config.json"
        if not file.is_file():
            raise FileNotFoundError(f"{file}: missing (not a Hugging Face model folder?)")
        try:
            cfg = json.loads(file.read_text())
        except json.JSONDecodeError as e:
            raise ValueError(f"{file}: invalid JSON ({e})") from e
        try:
            return cls.from_hf(cfg, source=str(file))
        except KeyError as e:
            raise ValueError(f"{file}: missing required field {e.args[0]!r}") from e
