"""The paper's models' chat templates, as the hub-layout fixtures carry them, rendered by Pivot.

Each folder is written by `tests/model/fixtures/hub_layouts.py` (tokenizer_config.json with the
family's template file and eos token) and read by `TextTokenizer.from_pretrained`, as a run reads
its policy and GenRM. The expected texts below are written by hand from the formats the model
families document (Qwen's ChatML with the Qwen2.5 base files' default system prompt, Qwen3/3.5's thinking
block, GLM-4-0414's `[gMASK]<sop>` prefix and role tags), not produced by the code under test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pivot.model import TextTokenizer
from tests.model.fixtures.hub_layouts import write_tiny, write_tokenizer
from tests.model.fixtures.hub_models import EOS_TOKENS, MODELS, chat_template

JUDGE = "Judge the response to the question.\nQuestion: What is 2+3?\nResponse: 5\nVerdict:"
QWEN25_SYSTEM = (
    "You are a helpful assistant."  # the base checkpoints' default (Instruct: "You are Qwen, ...")
)


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hub_chat")
    out = {}
    for name in ("Qwen2.5-1.5B", "Qwen3-30B-A3B", "GLM-Z1-9B-0414", "Qwen3.5-122B-A10B"):
        out[name] = write_tiny(name, root / name, shards=1)
        write_tokenizer(out[name])
    return out


def _tok(folders: dict[str, Path], name: str) -> TextTokenizer:
    return TextTokenizer.from_pretrained(folders[name])


def test_tokenizer_config_carries_the_template_and_eos(folders: dict[str, Path]) -> None:
    for name, path in folders.items():
        family = MODELS[name]["config"]["model_type"]
        cfg = json.loads((path / "tokenizer_config.json").read_text())
        assert cfg["chat_template"] == chat_template(family)
        assert cfg["eos_token"] == EOS_TOKENS[family]
        tok = _tok(folders, name)
        assert tok.chat_template == chat_template(family)
        assert tok.decode([tok.eos_id], keep_special=True) == EOS_TOKENS[family]


def test_qwen25_judge_prompt_gets_the_default_system_prompt(folders: dict[str, Path]) -> None:
    tok = _tok(folders, "Qwen2.5-1.5B")
    got = tok.render_chat(
        [{"role": "user", "content": JUDGE}], add_generation_prompt=True, enable_thinking=True
    )
    assert got == (
        f"<|im_start|>system\n{QWEN25_SYSTEM}<|im_end|>\n"
        f"<|im_start|>user\n{JUDGE}<|im_end|>\n<|im_start|>assistant\n"
    )
    policy = [
        {"role": "system", "content": "Reason step by step."},
        {"role": "user", "content": "What is 2+3?"},
    ]
    assert tok.render_chat(policy) == (
        "<|im_start|>system\nReason step by step.<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+3?<|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.parametrize("name", ["Qwen3-30B-A3B", "Qwen3.5-122B-A10B"])
def test_qwen3_family_judge_prompt(folders: dict[str, Path], name: str) -> None:
    tok = _tok(folders, name)
    msgs = [{"role": "user", "content": JUDGE}]
    base = f"<|im_start|>user\n{JUDGE}<|im_end|>\n<|im_start|>assistant\n"
    # thinking on: Qwen3 leaves the block to the model; Qwen3.5 opens it in the prompt
    thinking = base + ("<think>\n" if name.startswith("Qwen3.5") else "")
    assert tok.render_chat(msgs, enable_thinking=True) == thinking
    assert tok.render_chat(msgs, enable_thinking=False) == base + "<think>\n\n</think>\n\n"


@pytest.mark.parametrize("name", ["Qwen3-30B-A3B", "Qwen3.5-122B-A10B"])
def test_qwen3_family_drops_earlier_reasoning(folders: dict[str, Path], name: str) -> None:
    chat = [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "<think>\nr\n</think>\n\nx"},
        {"role": "user", "content": "b"},
    ]
    got = _tok(folders, name).render_chat(chat, enable_thinking=False)
    assert got == (
        "<|im_start|>user\na<|im_end|>\n<|im_start|>assistant\nx<|im_end|>\n"
        "<|im_start|>user\nb<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"
    )


def test_glm_z1_judge_prompt(folders: dict[str, Path]) -> None:
    tok = _tok(folders, "GLM-Z1-9B-0414")
    judge = tok.render_chat([{"role": "user", "content": JUDGE}])
    assert judge == f"[gMASK]<sop><|user|>\n{JUDGE}<|assistant|>\n<think>"
    chat = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "<think>r</think>x"},
        {"role": "user", "content": "b"},
    ]
    assert tok.render_chat(chat) == (
        "[gMASK]<sop><|system|>\nS<|user|>\na<|assistant|>\nx<|user|>\nb<|assistant|>\n<think>"
    )
    # the template's tags are one token each, as in the real vocabulary
    ids = tok.apply_chat_template([{"role": "user", "content": "hi"}])
    assert [tok.decode([i], keep_special=True) for i in ids[:3]] == ["[gMASK]", "<sop>", "<|user|>"]


def test_configs_carry_the_hub_eos_ids() -> None:
    cfg = MODELS["GLM-Z1-9B-0414"]["config"]
    assert cfg["eos_token_id"] == [151329, 151336, 151338] and cfg["pad_token_id"] == 151329
    q35 = MODELS["Qwen3.5-122B-A10B"]["config"]
    assert (q35["eos_token_id"], q35["pad_token_id"], q35["text_config"]["eos_token_id"]) == (
        248046,
        248044,
        248044,
    )
    assert MODELS["Qwen3-30B-A3B"]["config"]["eos_token_id"] == 151645
    assert all(
        MODELS[n]["config"]["eos_token_id"] == 151643 for n in MODELS if n.startswith("Qwen2.5")
    )


CHATS = [
    [{"role": "user", "content": JUDGE}],
    [
        {"role": "system", "content": "Reason step by step."},
        {"role": "user", "content": "What is 2+3? Größe €"},
    ],
    [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "<think>\nr\n</think>\n\nx"},
        {"role": "user", "content": "b"},
    ],
    [
        {"role": "user", "content": "What is the weather?"},
        {
            "role": "assistant",
            "content": "",
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


@pytest.mark.parametrize("family", ["qwen2", "qwen3_moe", "glm4", "qwen3_5_moe"])
@pytest.mark.parametrize("thinking", [True, False])
def test_templates_render_as_transformers_renders_them(family: str, thinking: bool) -> None:
    """transformers' own Jinja renderer is the oracle for the cases written by hand above and more
    (multi-turn, tools, non-ASCII)."""
    transformers = pytest.importorskip("transformers")
    from pivot.model.chat_template import render_chat

    render = transformers.utils.chat_template_utils.render_jinja_template
    source = chat_template(family)
    for chat in CHATS:
        for tools in (None, TOOLS):
            want = render(
                [chat],
                tools=tools,
                chat_template=source,
                add_generation_prompt=True,
                enable_thinking=thinking,
                eos_token=EOS_TOKENS[family],
            )
            want = want[0][0]  # (rendered conversations, generation masks)
            got = render_chat(
                source,
                chat,
                True,
                {"eos_token": EOS_TOKENS[family]},
                tools=tools,
                enable_thinking=thinking,
            )
            assert got == want, (family, chat, tools)


def test_an_exported_policy_keeps_its_chat_template_for_transformers(
    folders: dict[str, Path], tmp_path: Path
) -> None:
    """What the trainer exports (its weights, then the source's side files) loads in
    transformers with the source's tokenizer, chat template and generation defaults."""
    transformers = pytest.importorskip("transformers")
    from pivot.model import from_pretrained, save_pretrained
    from pivot.model.hf_folder import copy_side_files

    source = folders["Qwen2.5-1.5B"]
    save_pretrained(from_pretrained(source), tmp_path)
    copied = {p.name for p in copy_side_files(source, tmp_path)}
    assert {"tokenizer.json", "tokenizer_config.json"} <= copied
    chat = [{"role": "user", "content": JUDGE}]
    want = transformers.AutoTokenizer.from_pretrained(source).apply_chat_template(
        chat, tokenize=False, add_generation_prompt=True
    )
    got = transformers.AutoTokenizer.from_pretrained(tmp_path).apply_chat_template(
        chat, tokenize=False, add_generation_prompt=True
    )
    assert got == want and QWEN25_SYSTEM in got
    if (source / "generation_config.json").is_file():
        assert (tmp_path / "generation_config.json").read_text() == (
            source / "generation_config.json"
        ).read_text()
