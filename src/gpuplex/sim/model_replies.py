"""The simulated model server's reply bodies, in the shapes the official `openai` client parses:
chat completions, text completions, their server-sent-event chunks, embeddings and the model list.

Generated text is `completion_tokens` copies of a four-character token, so the gateway's estimate
(`gpuplex.core.serve.tokens`) counts exactly the tokens the reply's `usage` reports. Pure: ids and
the time come in as arguments."""

from __future__ import annotations

import base64
import hashlib
import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass

import orjson

from gpuplex.core.serve.inference import Endpoint
from gpuplex.sim.model_requests import GenerationRequest

#: One generated token: four characters, so `text_tokens` counts it as exactly one.
WORD = "tok "
DONE_EVENT = b"data: [DONE]\n\n"
OWNED_BY = "gpuplex-sim"


def generated_text(completion_tokens: int) -> str:
    return WORD * completion_tokens


_ID_PREFIX = {Endpoint.CHAT: "chatcmpl", Endpoint.COMPLETIONS: "cmpl", Endpoint.EMBEDDINGS: "embd"}


def reply_id(endpoint: Endpoint, suffix: str) -> str:
    """An OpenAI-looking id: `chatcmpl-...`, `cmpl-...` or `embd-...`."""
    return f"{_ID_PREFIX[endpoint]}-{suffix}"


def usage(request: GenerationRequest) -> dict[str, int]:
    if request.endpoint is Endpoint.EMBEDDINGS:
        return {"prompt_tokens": request.prompt_tokens, "total_tokens": request.prompt_tokens}
    return {
        "prompt_tokens": request.prompt_tokens,
        "completion_tokens": request.generated_tokens,
        "total_tokens": request.prompt_tokens + request.generated_tokens,
    }


def completion_reply(request: GenerationRequest, suffix: str, created_s: int) -> bytes:
    """The whole (non-streaming) reply to a chat or text completion request."""
    text = generated_text(request.completion_tokens)
    chat = request.endpoint is Endpoint.CHAT
    said: dict[str, object] = (
        {"message": {"role": "assistant", "content": text}} if chat else {"text": text}
    )
    choices = [
        {"index": index, **said, "logprobs": None, "finish_reason": request.finish_reason.value}
        for index in range(request.choices)
    ]
    kind = "chat.completion" if chat else "text_completion"
    return orjson.dumps(
        {
            "id": reply_id(request.endpoint, suffix),
            "object": kind,
            "created": created_s,
            "model": request.model,
            "choices": choices,
            "usage": usage(request),
        }
    )


@dataclass(frozen=True, slots=True)
class StreamEvents:
    """The server-sent events of one streamed reply: the first token's events (a chat stream's first
    delta also carries the role; one event per choice), every later token's events, and the end: the chunk with the
    finish reason, the usage chunk if the request asked for it, and `data: [DONE]`."""

    first: bytes
    token: bytes
    end: bytes


def stream_events(request: GenerationRequest, suffix: str, created_s: int) -> StreamEvents:
    chat = request.endpoint is Endpoint.CHAT
    head: dict[str, object] = {
        "id": reply_id(request.endpoint, suffix),
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": created_s,
        "model": request.model,
    }
    if request.include_usage:
        head["usage"] = None  # as OpenAI: every chunk but the last carries a null usage

    def event(choice: dict[str, object]) -> bytes:
        """The event for every choice, one after another (vLLM sends one per choice)."""
        return b"".join(
            b"data: "
            + orjson.dumps({**head, "choices": [{"index": index, **choice, "logprobs": None}]})
            + b"\n\n"
            for index in range(request.choices)
        )

    if chat:
        first = event({"delta": {"role": "assistant", "content": WORD}, "finish_reason": None})
        token = event({"delta": {"content": WORD}, "finish_reason": None})
        last = event({"delta": {}, "finish_reason": request.finish_reason.value})
    else:
        token = first = event({"text": WORD, "finish_reason": None})
        last = event({"text": "", "finish_reason": request.finish_reason.value})
    if request.include_usage:
        totals = {**head, "choices": [], "usage": usage(request)}
        last += b"data: " + orjson.dumps(totals) + b"\n\n"
    return StreamEvents(first=first, token=token, end=last + DONE_EVENT)


def embedding_vector(text: str, dimensions: int) -> list[float]:
    """A unit vector that depends only on `text` and `dimensions`."""
    digest = hashlib.shake_256(text.encode()).digest(4 * dimensions)
    raw = [n / 2**31 - 1.0 for n in struct.unpack(f"<{dimensions}I", digest)]
    norm = math.sqrt(sum(x * x for x in raw)) or 1.0
    return [x / norm for x in raw]


def embeddings_reply(request: GenerationRequest) -> bytes:
    """The reply to an embeddings request: one vector per input, as floats or base64 float32."""
    data: list[dict[str, object]] = []
    for index, text in enumerate(request.inputs):
        vector = embedding_vector(text, request.dimensions)
        encoded: object = vector
        if request.base64:
            encoded = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"object": "embedding", "index": index, "embedding": encoded})
    return orjson.dumps(
        {"object": "list", "data": data, "model": request.model, "usage": usage(request)}
    )


def models_reply(models: Sequence[str], adapters: Sequence[str], created_s: int) -> bytes:
    """`GET /v1/models`: the base models, then the LoRA adapters on the first (vLLM's shape)."""
    base = models[0] if models else None

    def card(name: str, parent: str | None) -> dict[str, object]:
        return {
            "id": name,
            "object": "model",
            "created": created_s,
            "owned_by": OWNED_BY,
            "root": parent or name,
            "parent": parent,
        }

    cards = [card(m, None) for m in models] + [card(a, base) for a in adapters]
    return orjson.dumps({"object": "list", "data": cards})
