"""Decoder models in Hugging Face layout (Qwen2, Qwen3, Llama, Qwen3-MoE, GLM-4, Qwen3.5-MoE)."""

from pivot.model.args import ModelArgs
from pivot.model.hf_folder import from_pretrained, load_state_dict, save_pretrained
from pivot.model.tokenizer import TextTokenizer
from pivot.model.transformer import AttentionBackend, CausalLM

__all__ = [
    "AttentionBackend",
    "CausalLM",
    "ModelArgs",
    "TextTokenizer",
    "from_pretrained",
    "load_state_dict",
    "save_pretrained",
]
