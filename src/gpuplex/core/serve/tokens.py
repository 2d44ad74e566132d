"""Token estimates for admission: a request reserves what it may use before it runs, and the
reservation is corrected from the response's `usage` afterwards.

The estimate is deliberately simple and tokenizer-free (the gateway must not load a model's
tokenizer): about four characters of English per token, as OpenAI documents for its tokenizers,
and one token for each character outside ASCII (tokenizers spend at least one on most of them).
Every input form a model reads counts: text, token-id arrays (one token per id), lists of either,
chat content parts (images and audio at a fixed cost, below), and everything else a chat request
puts into the prompt (tool calls, names, tool definitions, response schemas) by its JSON text.
The simulated model server counts tokens the same way, so tests know exact usage in advance.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import orjson

CHARS_PER_TOKEN = 4
#: What one image part of a chat message reserves: about a 1024x1024 image at high detail in
#: OpenAI's accounting (765), rounded up. The backend's reported usage replaces it afterwards.
IMAGE_PART_TOKENS = 1024
#: What one audio (or video) part reserves: about a minute of speech at 50 tokens a second.
AUDIO_PART_TOKENS = 3000
#: Chat content part types and their fixed cost; text parts count their text.
MEDIA_PART_TOKENS = {
    "image_url": IMAGE_PART_TOKENS,
    "input_image": IMAGE_PART_TOKENS,
    "input_audio": AUDIO_PART_TOKENS,
    "audio_url": AUDIO_PART_TOKENS,
    "video_url": AUDIO_PART_TOKENS,
}
TEXT_PART_TYPES = frozenset({"text", "input_text", "refusal"})
#: Top-level chat fields the server renders into the prompt.
PROMPT_FIELDS = ("tools", "functions", "response_format")


class UnknownContent(ValueError):
    """A chat content part of a type the gateway cannot count (it refuses the request)."""


def text_tokens(text: str) -> int:
    """Tokens in a piece of text: ceil(ASCII characters / 4) plus one per other character."""
    if text.isascii():
        return (len(text) + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN
    ascii_chars = len(text.encode("ascii", "ignore"))
    return (ascii_chars + CHARS_PER_TOKEN - 1) // CHARS_PER_TOKEN + len(text) - ascii_chars


def json_tokens(value: object) -> int:
    """Tokens of a JSON value by its serialised text (tool calls, schemas, names)."""
    if value is None:
        return 0
    if isinstance(value, str):
        return text_tokens(value)
    return text_tokens(orjson.dumps(value).decode())


def content_tokens(content: object) -> int:
    """Tokens of a chat message's `content`: a string, or a list of parts. Raises UnknownContent
    for a part that is not an object or whose type is neither text nor a known medium."""
    if content is None:
        return 0
    if isinstance(content, str):
        return text_tokens(content)
    if not isinstance(content, Sequence):
        raise UnknownContent("content must be a string or a list of parts")
    total = 0
    for part in content:
        if not isinstance(part, Mapping):
            raise UnknownContent("each content part must be an object")
        kind = part.get("type", "text")
        if kind in TEXT_PART_TYPES:
            total += json_tokens(part.get("refusal" if kind == "refusal" else "text"))
        elif kind in MEDIA_PART_TOKENS:
            total += MEDIA_PART_TOKENS[str(kind)]
        else:
            raise UnknownContent(f"content part type {kind!r} is not supported")
    return total


def message_tokens(message: Mapping[str, object]) -> int:
    """A chat message: its content, plus every other field but the role by its JSON text."""
    total = content_tokens(message.get("content"))
    for name, value in message.items():
        if name not in ("role", "content"):
            total += json_tokens(value)
    return total


def input_tokens(value: object) -> int | None:
    """Tokens of a completion `prompt` or embeddings `input`: a string, a token-id array, or a
    non-empty list of strings or of token-id arrays. None when it is none of those, or empty."""
    if isinstance(value, str):
        return text_tokens(value) if value else None
    if not isinstance(value, list) or not value:
        return None
    if all(isinstance(v, str) for v in value):
        return sum(text_tokens(v) for v in value)
    if is_token_array(value):
        return len(value)
    if all(isinstance(v, list) and v and is_token_array(v) for v in value):
        return sum(len(v) for v in value)
    return None


def is_token_array(value: list[object]) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in value)


def prompt_tokens(body: Mapping[str, object]) -> int:
    """Estimated prompt tokens of an OpenAI request body: chat `messages` (and what else a chat
    request puts into the prompt), completion `prompt` (and `suffix`) or embeddings `input`.
    Shapes the server would refuse count as 0; UnknownContent for an uncountable chat part."""
    messages = body.get("messages")
    if isinstance(messages, list):
        total = sum(message_tokens(m) for m in messages if isinstance(m, Mapping))
        return total + sum(json_tokens(body.get(name)) for name in PROMPT_FIELDS)
    for name in ("prompt", "input"):
        counted = input_tokens(body.get(name))
        if counted is not None:
            suffix = body.get("suffix")
            return counted + (text_tokens(suffix) if isinstance(suffix, str) else 0)
    return 0
