"""Random-weight tiny checkpoints with a character tokenizer, for fast runtime tests
(the learning signal is not the point here; the trained tiny models are for the main job)."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers

from pivot.model import CausalLM, ModelArgs, save_pretrained

CHARS = list("0123456789+-=?:.,()/ \nabcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")


def char_tokenizer(path: Path) -> Path:
    vocab = {"<|endoftext|>": 0, "<|pad|>": 1, **{c: i + 2 for i, c in enumerate(CHARS)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<|pad|>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(["<|endoftext|>", "<|pad|>"])
    path.mkdir(parents=True, exist_ok=True)
    tok.save(str(path / "tokenizer.json"))
    return path / "tokenizer.json"


# the GenRM families beyond the dense default, written by transformers' own classes as the hub
# lays them out: (config class, model class, their extra hyper-parameters)
HF_GENRMS = {
    "qwen3_moe": (
        "Qwen3MoeConfig",
        "Qwen3MoeForCausalLM",
        {
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 16,
            "norm_topk_prob": True,
        },
    ),
    "glm4": ("Glm4Config", "Glm4ForCausalLM", {"partial_rotary_factor": 0.5}),
}


def hf_genrm(path: Path, family: str, tokenizer_file: Path, seed: int, head_dim: int = 8) -> Path:
    """A tiny GenRM folder of `family` written by transformers; `head_dim` 32 shapes it for vLLM's
    CPU build (attention heads of 32 or more, expert columns a multiple of 32)."""
    import torch
    import transformers

    config_cls, model_cls, extra = HF_GENRMS[family]
    if head_dim != 8 and "moe_intermediate_size" in extra:
        extra = {**extra, "moe_intermediate_size": 32}
    torch.manual_seed(seed)
    cfg = getattr(transformers, config_cls)(
        vocab_size=len(CHARS) + 2,
        hidden_size=32 if head_dim == 8 else 2 * head_dim,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4 if head_dim == 8 else 2,
        num_key_value_heads=2,
        head_dim=head_dim,
        tie_word_embeddings=True,
        eos_token_id=0,
        pad_token_id=1,
        max_position_embeddings=512,
        **extra,
    )
    getattr(transformers, model_cls)(cfg).save_pretrained(path)
    (path / "tokenizer.json").write_bytes(tokenizer_file.read_bytes())
    return path


def hybrid_genrm(path: Path, tokenizer_file: Path, seed: int) -> Path:
    """A tiny Qwen3.5-MoE vision-language folder written by transformers (Pivot only loads it)."""
    import torch
    import transformers

    torch.manual_seed(seed)
    text = {
        "vocab_size": len(CHARS) + 2,
        "hidden_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "layer_types": ["linear_attention", "full_attention"],
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 8,
        "linear_value_head_dim": 8,
        "linear_conv_kernel_dim": 4,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 16,
        "shared_expert_intermediate_size": 16,
        "eos_token_id": 0,
        "pad_token_id": 1,
        "max_position_embeddings": 512,
    }
    vision = {
        "depth": 1,
        "hidden_size": 16,
        "intermediate_size": 32,
        "num_heads": 2,
        "out_hidden_size": 32,
        "patch_size": 4,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
    }
    cfg = transformers.Qwen3_5MoeConfig(text_config=text, vision_config=vision)
    transformers.Qwen3_5MoeForConditionalGeneration(cfg).save_pretrained(path)
    (path / "tokenizer.json").write_bytes(tokenizer_file.read_bytes())
    return path


def random_models(
    root: Path, seed: int = 0, genrm_family: str = "qwen2", head_dim: int = 8
) -> tuple[Path, Path]:
    """`head_dim` 32: shaped for vLLM's CPU attention (it takes 32, 64, 80, ...), two heads."""
    import torch

    tok = char_tokenizer(root / "tok")
    out = []
    for name, layers in (("policy", 2), ("genrm", 1))[: 1 if genrm_family != "qwen2" else 2]:
        torch.manual_seed(seed + layers)
        args = ModelArgs(
            family="qwen2",
            vocab_size=len(CHARS) + 2,
            hidden_size=32 if head_dim == 8 else 2 * head_dim,
            intermediate_size=64,
            num_hidden_layers=layers,
            num_attention_heads=4 if head_dim == 8 else 2,
            num_key_value_heads=2,
            head_dim=head_dim,
            tie_word_embeddings=True,
            eos_token_id=0,
            pad_token_id=1,
            max_position_embeddings=512,
        )
        save_pretrained(CausalLM(args), root / name, tokenizer_file=tok)
        out.append(root / name)
    if genrm_family == "qwen3_5_moe":
        out.append(hybrid_genrm(root / "genrm", tok, seed))
    elif genrm_family != "qwen2":
        out.append(hf_genrm(root / "genrm", genrm_family, tok, seed + 1, head_dim))
    return out[0], out[1]


if __name__ == "__main__":
    import sys

    print(random_models(Path(sys.argv[1])))
