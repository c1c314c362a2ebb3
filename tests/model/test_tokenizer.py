"""Tokenizer folders as users have them: special ids and chat templates equal transformers'.

The folder is written here (a small byte-level BPE, a Qwen3-style tokenizer_config.json and
generation_config.json, the Qwen3-style template in fixtures/); transformers' AutoTokenizer and
GenerationConfig read the same folder and are the oracle.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

from pivot.model import TextTokenizer

transformers = pytest.importorskip("transformers")

QWEN3_TEMPLATE = (Path(__file__).parent / "fixtures" / "qwen3_chat_template.jinja").read_text()
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# a Llama-style template: BOS from the special tokens, blocks without '-' (trim/lstrip decide the
# whitespace), tojson of non-ASCII text, raise_exception
PLAIN_TEMPLATE = """{{ bos_token }}
{% for m in messages %}
    {% if m.role not in ['system', 'user', 'assistant'] %}
        {{ raise_exception('unknown role ' + m.role) }}
    {% endif %}
[{{ m.role | upper }}] {{ m.content | trim }}
    {% if loop.last and m.meta is defined %}meta={{ m.meta | tojson }}{% endif %}
{% endfor %}
{% if add_generation_prompt %}[ASSISTANT]{% endif %}"""

CHATS = [
    [
        {"role": "system", "content": "You grade answers."},
        {"role": "user", "content": "Is 2+2=4 right?"},
    ],
    [
        {"role": "user", "content": "Solve x+1=3."},
        {"role": "assistant", "content": "<think>\nsubtract one\n</think>\n\nx = 2"},
        {"role": "user", "content": "And x+2=3? Größe €"},
    ],
    [
        {"role": "user", "content": "What is the weather?"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "call the tool",
            "tool_calls": [{"function": {"name": "weather", "arguments": {"city": "Zürich"}}}],
        },
        {"role": "tool", "content": "sunny"},
    ],
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "weather",
            "description": "Wetter für eine Stadt",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]


def _write_folder(path: Path, template_in_config: str | None, template_file: str | None) -> None:
    corpus = [
        json.dumps(CHATS),
        QWEN3_TEMPLATE,
        "the quick brown fox jumps over the lazy dog 0123456789",
    ] * 3
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=400,
            special_tokens=SPECIAL,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    tok.add_tokens([AddedToken("<think>", special=False), AddedToken("</think>", special=False)])
    path.mkdir(parents=True, exist_ok=True)
    tok.save(str(path / "tokenizer.json"))
    cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|im_end|>",
        "bos_token": "<|endoftext|>",
        "pad_token": {
            "__type": "AddedToken",
            "content": "<|endoftext|>",
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        },
        "model_max_length": 4096,
    }
    if template_in_config is not None:
        cfg["chat_template"] = template_in_config
    (path / "tokenizer_config.json").write_text(json.dumps(cfg))
    if template_file is not None:
        (path / "chat_template.jinja").write_text(template_file)
    ids = {t: tok.token_to_id(t) for t in SPECIAL}
    (path / "generation_config.json").write_text(
        json.dumps({"eos_token_id": [ids["<|im_end|>"], ids["<|endoftext|>"]]})
    )


@pytest.fixture(scope="module")
def qwen3_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("qwen3_tok")
    _write_folder(path, QWEN3_TEMPLATE, None)
    return path


def _hf_ids(path: Path, messages: list[dict], **kwargs: object) -> list[int]:
    hf = transformers.AutoTokenizer.from_pretrained(path)
    return list(hf.apply_chat_template(messages, tokenize=True, return_dict=False, **kwargs))


def test_special_ids_from_config_files(qwen3_folder: Path) -> None:
    ours = TextTokenizer.from_pretrained(qwen3_folder)
    hf = transformers.AutoTokenizer.from_pretrained(qwen3_folder)
    gen = transformers.GenerationConfig.from_pretrained(qwen3_folder)
    assert ours.eos_id == hf.eos_token_id and ours.pad_id == hf.pad_token_id != ours.eos_id
    assert ours.eos_ids == tuple(dict.fromkeys([hf.eos_token_id, *gen.eos_token_id]))
    assert len(ours.eos_ids) == 2


@pytest.mark.parametrize("chat", range(len(CHATS)))
@pytest.mark.parametrize(
    "switches",
    [
        {"add_generation_prompt": True},
        {"add_generation_prompt": False},
        {"add_generation_prompt": True, "enable_thinking": False},
        {"add_generation_prompt": True, "tools": TOOLS},
    ],
    ids=["gen", "nogen", "nothink", "tools"],
)
def test_qwen3_template_matches_transformers(qwen3_folder: Path, chat: int, switches: dict) -> None:
    ours = TextTokenizer.from_pretrained(qwen3_folder)
    got = ours.apply_chat_template(CHATS[chat], **switches)
    assert got == _hf_ids(qwen3_folder, CHATS[chat], **switches)
    assert "<|im_start|>" in ours.render_chat(CHATS[chat], **switches)


def test_template_file_wins_and_plain_template(tmp_path: Path) -> None:
    _write_folder(tmp_path, QWEN3_TEMPLATE, PLAIN_TEMPLATE)
    ours = TextTokenizer.from_pretrained(tmp_path)
    chat = [
        {"role": "system", "content": "  judge  "},
        {"role": "user", "content": "hi", "meta": {"ü": [1, "é"]}},
    ]
    for gen in (True, False):
        assert ours.apply_chat_template(chat, add_generation_prompt=gen) == _hf_ids(
            tmp_path, chat, add_generation_prompt=gen
        )
    assert ours.render_chat(chat).startswith(
        "<|endoftext|>\n[SYSTEM] judge\n[USER] hi"
    )  # the file, not the config
    with pytest.raises(ValueError, match="chat template failed: unknown role robot"):
        ours.apply_chat_template([{"role": "robot", "content": "x"}])


def test_folder_without_config_falls_back(tmp_path: Path) -> None:
    _write_folder(tmp_path, None, None)
    (tmp_path / "tokenizer_config.json").unlink()
    (tmp_path / "generation_config.json").unlink()
    ours = TextTokenizer.from_pretrained(tmp_path)
    end = ours.tok.token_to_id("<|endoftext|>")
    assert ours.eos_id == ours.pad_id == end and ours.eos_ids == (end,)
    with pytest.raises(ValueError, match="no chat template"):
        ours.apply_chat_template([{"role": "user", "content": "x"}])
