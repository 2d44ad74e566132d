"""Token bounds for admission: a request reserves at least what the model server can read and
generate for it before it runs, and the reservation is corrected from the server's `usage` after.

The bound is an upper bound, not a guess: a request must never make the server read more tokens
than its tenant's limit was charged, whatever the text (a guess such as "four characters a token"
is passed 2.75x by text chosen to tokenize badly). It holds without the model's tokenizer (the
gateway loads none) because every tokenizer in use spends at least one byte of text per token:
byte-level BPE (GPT, Llama 3, Qwen, Mistral's Tekken), SentencePiece with byte fallback (one token
per byte at worst), WordPiece. So text costs at most its UTF-8 bytes. What the server adds around
the text is bounded by two settings: the chat template's tokens per message (turn markers; the
role is counted by its bytes) and per request (BOS, the generation prompt, a default system
prompt, tool instructions) - `PromptOverhead`, from `gateway.message_overhead_tokens` and
`gateway.request_overhead_tokens`. Token-id arrays count one per id. Images and audio parts have
fixed costs (below) that the backend's usage replaces afterwards.

Each endpoint counts only the fields that endpoint's server reads (a chat body's `messages`,
a completion's `prompt` and `suffix`, an embedding's `input`); the gateway forwards nothing else
that reaches the prompt (request_fields.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import orjson

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
PROMPT_FIELDS = ("tools", "functions", "response_format", "tool_choice")


@dataclass(frozen=True, slots=True)
class PromptOverhead:
    """Tokens a server adds beyond the text it is sent: per chat message (or per prompt of a
    completion or embedding list) and once per request."""

    per_message: int = 8
    per_request: int = 128


DEFAULT_OVERHEAD = PromptOverhead()


class UnknownContent(ValueError):
    """A chat content part of a type the gateway cannot count (it refuses the request)."""


def text_tokens(text: str) -> int:
    """The most tokens a piece of text can be: its UTF-8 bytes."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def json_tokens(value: object) -> int:
    """The most tokens of a JSON value by its serialised text (tool calls, schemas, names)."""
    if value is None:
        return 0
    if isinstance(value, str):
        return text_tokens(value)
    return len(orjson.dumps(value))


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


def message_tokens(message: Mapping[str, object], overhead: PromptOverhead) -> int:
    """A chat message: its content, every other field (the role too) by its text, and the
    template's per-message tokens."""
    total = overhead.per_message + content_tokens(message.get("content"))
    for name, value in message.items():
        if name != "content":
            total += json_tokens(value)
    return total


def input_tokens(value: object, overhead: PromptOverhead = DEFAULT_OVERHEAD) -> int | None:
    """Tokens of a completion `prompt` or embeddings `input`: a string, a token-id array, or a
    non-empty list of strings or of token-id arrays, each with the per-prompt overhead. None when
    it is none of those, or empty."""
    if isinstance(value, str):
        return text_tokens(value) + overhead.per_message if value else None
    if not isinstance(value, list) or not value:
        return None
    if all(isinstance(v, str) for v in value):
        return sum(text_tokens(v) + overhead.per_message for v in value)
    if is_token_array(value):
        return len(value) + overhead.per_message
    if all(isinstance(v, list) and v and is_token_array(v) for v in value):
        return sum(len(v) + overhead.per_message for v in value)
    return None


def prompt_count(value: object) -> int:
    """How many prompts a completion `prompt` holds: a list of strings or of token-id arrays is
    one per item (the server runs each), anything else is one."""
    if isinstance(value, list) and value and not is_token_array(value):
        return len(value)
    return 1


def is_token_array(value: list[object]) -> bool:
    return all(isinstance(v, int) and not isinstance(v, bool) for v in value)


def chat_prompt_tokens(
    body: Mapping[str, object], overhead: PromptOverhead = DEFAULT_OVERHEAD
) -> int:
    """The most tokens a chat request's prompt can be: its messages and what else the template
    renders. UnknownContent for an uncountable content part."""
    messages = body.get("messages")
    total = overhead.per_request
    if isinstance(messages, list):
        total += sum(message_tokens(m, overhead) for m in messages if isinstance(m, Mapping))
    return total + sum(json_tokens(body.get(name)) for name in PROMPT_FIELDS)


def completion_prompt_tokens(
    body: Mapping[str, object], field: str, overhead: PromptOverhead = DEFAULT_OVERHEAD
) -> int:
    """The most tokens a completion's `prompt` (and `suffix`) or an embedding's `input` can be;
    0 for a shape the server would refuse."""
    counted = input_tokens(body.get(field), overhead)
    if counted is None:
        return 0
    suffix = body.get("suffix")
    return overhead.per_request + counted + (text_tokens(suffix) if isinstance(suffix, str) else 0)
