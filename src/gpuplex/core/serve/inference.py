"""What the gateway needs to know of an OpenAI request body before it forwards it: the model, whether
it streams, and how many tokens to reserve. Checks only what the gateway relies on; the model server
checks the rest. A bad body gives a `BadRequest` naming the field, never an exception."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from gpuplex.core.serve.tokens import prompt_tokens


class Endpoint(StrEnum):
    CHAT = "chat.completions"
    COMPLETIONS = "completions"
    EMBEDDINGS = "embeddings"


ENDPOINT_PATHS = {
    "/v1/chat/completions": Endpoint.CHAT,
    "/v1/completions": Endpoint.COMPLETIONS,
    "/v1/embeddings": Endpoint.EMBEDDINGS,
}


@dataclass(frozen=True, slots=True)
class InferenceRequest:
    endpoint: Endpoint
    model: str
    stream: bool
    prompt_tokens: int  # estimate
    max_tokens: int  # what it may generate (0 for embeddings)

    @property
    def reserved_tokens(self) -> int:
        return self.prompt_tokens + self.max_tokens


@dataclass(frozen=True, slots=True)
class BadRequest:
    message: str
    param: str | None = None


def read_request(
    endpoint: Endpoint, body: object, default_max_tokens: int
) -> InferenceRequest | BadRequest:
    if not isinstance(body, Mapping):
        return BadRequest("the request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return BadRequest("model must be a non-empty string", "model")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        return BadRequest("stream must be true or false", "stream")
    problem = _check_input(endpoint, body)
    if problem is not None:
        return problem
    max_tokens = 0
    if endpoint is not Endpoint.EMBEDDINGS:
        max_tokens = default_max_tokens
        for name in ("max_completion_tokens", "max_tokens"):
            value = body.get(name)
            if value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                return BadRequest(f"{name} must be a positive integer", name)
            max_tokens = value
    return InferenceRequest(endpoint, model, stream, prompt_tokens(body), max_tokens)


def _check_input(endpoint: Endpoint, body: Mapping[str, object]) -> BadRequest | None:
    if endpoint is Endpoint.CHAT:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return BadRequest("messages must be a non-empty list", "messages")
        if not all(isinstance(m, Mapping) for m in messages):
            return BadRequest("each message must be an object", "messages")
        return None
    field = "prompt" if endpoint is Endpoint.COMPLETIONS else "input"
    value = body.get(field)
    if isinstance(value, str) or (isinstance(value, list) and value):
        return None
    return BadRequest(f"{field} must be a string or a non-empty list", field)
