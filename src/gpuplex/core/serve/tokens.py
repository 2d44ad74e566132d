"""Token estimates for admission: a request reserves what it may use before it runs, and the
reservation is corrected from the response's `usage` afterwards.

The estimate is deliberately simple and tokenizer-free (the gateway must not load a model's
tokenizer): about four characters of English per token, as OpenAI documents for its tokenizers.
The simulated model server counts tokens the same way, so tests know exact usage in advance.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

CHARS_PER_TOKEN = 4


def text_tokens(text: str) -> int:
    """Tokens in a piece of text: ceil(characters / 4), at least 1 for non-empty text."""
    return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN


def content_text(content: object) -> str:
    """The text of a chat message's `content`: a string, or a list of parts with `text`."""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return "".join(
            part["text"]
            for part in content
            if isinstance(part, Mapping) and isinstance(part.get("text"), str)
        )
    return ""


def prompt_tokens(body: Mapping[str, object]) -> int:
    """Estimated prompt tokens of an OpenAI request body: chat `messages`, completion `prompt`
    or embeddings `input` (a string or a list of strings). Unknown shapes count as 0."""
    messages = body.get("messages")
    if isinstance(messages, Sequence) and not isinstance(messages, str):
        return sum(
            text_tokens(content_text(m.get("content"))) for m in messages if isinstance(m, Mapping)
        )
    for field in ("prompt", "input"):
        value = body.get(field)
        if isinstance(value, str):
            return text_tokens(value)
        if isinstance(value, Sequence):
            return sum(text_tokens(v) for v in value if isinstance(v, str))
    return 0
