"""The simulated model's own tokenizer and chat template: a real byte-level BPE, trained the same way
every time, whose generated words read back as one token each, and a template that puts the chat's
turns, tools and generation prompt into the prompt. The simulated server must never count with the
gateway's estimate, which it is there to check."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from gpuplex.sim.model_chat import ChatRefused, render_chat, tool_arguments
from gpuplex.sim.model_tokenizer import (
    SPECIAL_TOKENS,
    VOCAB_SIZE,
    corpus_texts,
    sim_tokenizer,
    train,
)

SIM = Path(__file__).resolve().parents[3] / "src" / "gpuplex" / "sim"


def test_training_is_deterministic_and_fills_the_vocabulary() -> None:
    again = train(corpus_texts())
    tokenizer = sim_tokenizer()
    assert tokenizer.vocab_size == again.vocab_size == VOCAB_SIZE
    text = "def tokens(prompt: str) -> list[int]:  # 日本語 and emoji 🙂"
    assert again.encode(text) == tokenizer.encode(text)
    assert again.words == tokenizer.words


def test_it_is_a_real_subword_tokenizer_not_a_character_estimate() -> None:
    tokenizer = sim_tokenizer()
    prose = " return the value of the argument"
    assert tokenizer.count(prose) < len(prose) / 4  # common words are one token each
    assert tokenizer.count("zqxjvkw" * 4) > len("zqxjvkw" * 4) / 4  # rare letters are not
    assert tokenizer.decode(tokenizer.encode("日本語 🙂")) == "日本語 🙂"  # bytes round-trip
    assert tokenizer.count("🙂") > 1


def test_special_tokens_are_single_tokens_and_bos_is_added_on_request() -> None:
    tokenizer = sim_tokenizer()
    for token in SPECIAL_TOKENS:
        assert len(tokenizer.encode(token)) == 1
    assert tokenizer.encode("hi", add_bos=True) == [tokenizer.bos_id, *tokenizer.encode("hi")]


def test_generated_words_count_as_one_token_each_however_they_are_joined() -> None:
    tokenizer = sim_tokenizer()
    words = [tokenizer.piece(w) for w in tokenizer.words]
    assert len(set(words)) == len(words) >= 32
    assert all(w.startswith(" ") and w[1:].isalpha() for w in words)
    text = "".join(words[i % len(words)] for i in range(500))
    assert tokenizer.count(text) == 500


def test_the_chat_template_renders_turns_tools_and_the_generation_prompt() -> None:
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Hi"}], "name": "ignored"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1"}]},
        {"role": "developer", "content": "x"},
    ]
    text = render_chat(messages, [{"type": "function", "function": {"name": "f"}}])
    assert text == (
        "<s><|system|>\n# Tools\n"
        '[{"type":"function","function":{"name":"f"}}]<|end|>\n'
        "<|system|>\nBe brief.<|end|>\n"
        "<|user|>\nHi<|end|>\n"
        '<|assistant|>\n[{"id":"c1"}]<|end|>\n'
        "<|developer|>\nx<|end|>\n"
        "<|assistant|>\n"
    )
    user = [{"role": "user", "content": "Hi"}]
    assert render_chat(user, add_generation_prompt=False) == "<s><|user|>\nHi<|end|>\n"
    assert render_chat(user, continue_final_message=True) == "<s><|user|>\nHi"


@pytest.mark.parametrize(
    "messages",
    [
        ["hi"],
        [{"content": "no role"}],
        [{"role": "user", "content": 7}],
        [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
        [{"role": "user", "content": [{"type": "text"}]}],
    ],
)
def test_messages_a_text_model_cannot_read_are_refused(messages: list[object]) -> None:
    with pytest.raises(ChatRefused):
        render_chat(messages)


def test_tool_arguments_fill_the_schemas_properties() -> None:
    tool = {"function": {"name": "f", "parameters": {"properties": {"city": {}, "unit": {}}}}}
    assert tool_arguments(tool, [" a", " b", " c"]) == '{"city":"a b","unit":"c a"}'
    assert tool_arguments({"function": {"name": "g"}}, [" a"]) == "{}"


def test_the_simulated_server_never_imports_the_gateways_token_estimate() -> None:
    for path in SIM.glob("model_*.py"):
        tree = ast.parse(path.read_text())
        imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)} | {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        }
        assert "gpuplex.core.serve.tokens" not in imported, path.name
        assert "gpuplex.core.serve.stream_usage" not in imported, path.name
