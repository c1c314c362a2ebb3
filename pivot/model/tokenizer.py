"""Tokenizer IO as a model folder ships it: tokenizer.json, tokenizer_config.json, chat template.

Encoding goes through `tokenizers` (the fast tokenizer.json format HF uses). The end and pad
tokens come from `tokenizer_config.json` (end ids also from `generation_config.json`, often a
list), the chat template from `chat_template.jinja` or else `tokenizer_config.json`, the way
transformers resolves them; a folder without them falls back to `<|endoftext|>` / `<|pad|>`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from pivot.model.chat_template import render_chat

_NAMED_TOKENS = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)


class TextTokenizer:
    """Encode/decode, the special ids the engine and RL loop need, and the chat template."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        eos_token: str = "<|endoftext|>",
        pad_token: str | None = None,
        chat_template: str | None = None,
        extra_eos_ids: Sequence[int] = (),
        special_tokens: dict[str, str] | None = None,
    ) -> None:
        self.tok = tokenizer
        self.eos_id = self._id(eos_token, "end-of-sequence")
        if pad_token is not None:
            self.pad_id = self._id(pad_token, "pad")
        else:
            pad = tokenizer.token_to_id("<|pad|>")
            self.pad_id = self.eos_id if pad is None else pad
        self.eos_ids = tuple(dict.fromkeys([self.eos_id, *extra_eos_ids]))  # ordered, no repeats
        self.chat_template = chat_template
        self.special_tokens = (
            dict(special_tokens) if special_tokens is not None else {"eos_token": eos_token}
        )

    def _id(self, token: str, what: str) -> int:
        token_id = self.tok.token_to_id(token)
        if token_id is None:
            raise ValueError(f"tokenizer has no {what} token {token!r}")
        return token_id

    @classmethod
    def from_pretrained(cls, path: str | Path) -> TextTokenizer:
        path = Path(path)
        file = path / "tokenizer.json"
        if not file.is_file():
            raise FileNotFoundError(f"{file}: missing")
        try:
            tok = Tokenizer.from_file(str(file))
        except Exception as e:
            raise ValueError(f"{file}: not a valid tokenizer.json ({e})") from e
        cfg = _read_json(path / "tokenizer_config.json")
        named = {k: text for k in _NAMED_TOKENS if (text := _token_text(cfg.get(k))) is not None}
        gen_eos = _read_json(path / "generation_config.json").get("eos_token_id")
        extra = gen_eos if isinstance(gen_eos, list) else [] if gen_eos is None else [gen_eos]
        try:
            return cls(
                tok,
                eos_token=named.get("eos_token", "<|endoftext|>"),
                pad_token=named.get("pad_token"),
                chat_template=_chat_template(path, cfg),
                extra_eos_ids=[int(i) for i in extra],
                special_tokens=named,
            )
        except ValueError as e:
            raise ValueError(f"{path}: {e}") from e

    @property
    def vocab_size(self) -> int:
        return self.tok.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int], keep_special: bool = False) -> str:
        """The text of `ids`; special tokens (EOS, padding) are dropped unless `keep_special`."""
        return self.tok.decode(ids, skip_special_tokens=not keep_special)

    def render_chat(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool = True,
        **template_kwargs: Any,
    ) -> str:
        """The chat template's text for `messages`; extra keywords are template switches."""
        if self.chat_template is None:
            raise ValueError(
                "tokenizer has no chat template (no chat_template.jinja, none in tokenizer_config.json)"
            )
        return render_chat(
            self.chat_template,
            messages,
            add_generation_prompt,
            self.special_tokens,
            **template_kwargs,
        )

    def apply_chat_template(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool = True,
        **template_kwargs: Any,
    ) -> list[int]:
        """Token ids of the rendered conversation (the template writes any BOS itself)."""
        return self.encode(self.render_chat(messages, add_generation_prompt, **template_kwargs))


def _read_json(file: Path) -> dict[str, Any]:
    if not file.is_file():
        return {}
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise ValueError(f"{file}: invalid JSON ({e})") from e
    if not isinstance(data, dict):
        raise ValueError(f"{file}: expected a JSON object, got {type(data).__name__}")
    return data


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or an AddedToken dict."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _chat_template(path: Path, cfg: dict[str, Any]) -> str | None:
    file = path / "chat_template.jinja"
    if file.is_file():  # a separate template file wins over the config's, as in transformers
        return file.read_text(encoding="utf-8")
    template = cfg.get("chat_template")
    if isinstance(template, list):  # named templates: [{"name": ..., "template": ...}]
        named: dict[Any, Any] = {
            t.get("name"): t.get("template") for t in template if isinstance(t, dict)
        }
        if "default" not in named:
            raise ValueError(
                f"{path / 'tokenizer_config.json'}: chat_template has no 'default' among {sorted(named)}"
            )
        template = named["default"]
    if template is not None and not isinstance(template, str):
        raise ValueError(
            f"{path / 'tokenizer_config.json'}: chat_template must be a string, got {type(template).__name__}"
        )
    return template
