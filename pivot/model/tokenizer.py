"""Tokenizer IO through `tokenizers` (the fast tokenizer.json format HF uses)."""
from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer


class TextTokenizer:
    """Thin wrapper: encode/decode plus the special ids the engine and RL loop need."""

    def __init__(self, tokenizer: Tokenizer, eos_token: str = "<|endoftext|>") -> None:
        self.tok = tokenizer
        eos = tokenizer.token_to_id(eos_token)
        if eos is None:
            raise ValueError(f"tokenizer has no end-of-sequence token {eos_token!r}")
        self.eos_id = eos
        pad = tokenizer.token_to_id("<|pad|>")
        self.pad_id = eos if pad is None else pad

    @classmethod
    def from_pretrained(cls, path: str | Path) -> TextTokenizer:
        file = Path(path) / "tokenizer.json"
        if not file.is_file():
            raise FileNotFoundError(f"{file}: missing")
        try:
            return cls(Tokenizer.from_file(str(file)))
        except Exception as e:
            raise ValueError(f"{file}: not a valid tokenizer.json ({e})") from e

    @property
    def vocab_size(self) -> int:
        return self.tok.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=True)
