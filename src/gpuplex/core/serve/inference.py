"""What the gateway needs to know of an OpenAI request body before it forwards it: the model, whether
it streams, and how many tokens to reserve. Checks only what the gateway relies on; the model server
checks the rest. A bad body gives a `BadRequest` naming the field, never an exception."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from gpuplex.core.serve.tokens import UnknownContent, input_tokens, prompt_tokens


class Endpoint(StrEnum):
    CHAT = "chat.completions"
    COMPLETIONS = "completions"
    EMBEDDINGS = "embeddings"


ENDPOINT_PATHS = {
    "/v1/chat/completions": Endpoint.CHAT,
    "/v1/completions": Endpoint.COMPLETIONS,
    "/v1/embeddings": Endpoint.EMBEDDINGS,
}


#: OpenAI's bounds on `n` (choices per request) and `best_of` (completions only).
MAX_CHOICES = 128
MAX_BEST_OF = 20
#: The fields a request may limit its completion with, the one that wins first: OpenAI deprecated
#: `max_tokens` for `max_completion_tokens`, and vLLM's and SGLang's chat servers read
#: `max_completion_tokens or max_tokens`.
LIMIT_FIELDS = ("max_completion_tokens", "max_tokens")


@dataclass(frozen=True, slots=True)
class InferenceRequest:
    endpoint: Endpoint
    model: str
    stream: bool
    prompt_tokens: int  # estimate
    max_tokens: int  # what each choice may generate: the one value forwarded (0 for embeddings)
    choices: int = 1  # sequences the server generates: max(n, best_of)

    @property
    def completion_budget(self) -> int:
        return self.max_tokens * self.choices

    @property
    def reserved_tokens(self) -> int:
        return self.prompt_tokens + self.completion_budget


@dataclass(frozen=True, slots=True)
class BadRequest:
    message: str
    param: str | None = None


def read_request(
    endpoint: Endpoint, body: object, default_max_tokens: int, token_cap: int | None = None
) -> InferenceRequest | BadRequest:
    """The facts of a request body, with its completion budget decided once: the first of
    LIMIT_FIELDS it sets, else `default_max_tokens` lowered so that prompt + budget fits
    `token_cap` (the smallest tokens-per-minute limit the caller is under, if any)."""
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
    try:
        prompt = prompt_tokens(body)
    except UnknownContent as error:
        return BadRequest(f"messages: {error}", "messages")
    if endpoint is Endpoint.EMBEDDINGS:
        return InferenceRequest(endpoint, model, stream, prompt, 0)
    choices = _choices(endpoint, body)
    if isinstance(choices, BadRequest):
        return choices
    asked = _asked_max_tokens(body)
    if isinstance(asked, BadRequest):
        return asked
    if asked is None:
        asked = default_max_tokens
        if token_cap is not None:
            asked = max(1, min(asked, (token_cap - prompt) // choices))
    return InferenceRequest(endpoint, model, stream, prompt, asked, choices)


def forwarded_body(
    body: Mapping[str, object], request: InferenceRequest, upstream_model: str
) -> dict[str, object] | None:
    """The body to send the model server, or None when `body` already says exactly what was
    decided. The completion budget goes into every field a server might read (chat: both
    LIMIT_FIELDS; completions: `max_tokens`, the only one there), so no server can generate more
    than was reserved, whichever field it prefers; the model becomes the server's name for it."""
    changes: dict[str, object] = {}
    if body.get("model") != upstream_model:
        changes["model"] = upstream_model
    budget = request.max_tokens
    drop: tuple[str, ...] = ()
    if request.endpoint is Endpoint.CHAT:
        if any(body.get(name) != budget for name in LIMIT_FIELDS):
            changes.update(dict.fromkeys(LIMIT_FIELDS, budget))
    elif request.endpoint is Endpoint.COMPLETIONS:
        if body.get("max_tokens") != budget:
            changes["max_tokens"] = budget
        if "max_completion_tokens" in body:
            drop = ("max_completion_tokens",)
    if not changes and not drop:
        return None
    forwarded = {name: value for name, value in body.items() if name not in drop}
    forwarded.update(changes)
    return forwarded


def _asked_max_tokens(body: Mapping[str, object]) -> int | BadRequest | None:
    asked: int | None = None
    for name in LIMIT_FIELDS:
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            return BadRequest(f"{name} must be a positive integer", name)
        if asked is None:
            asked = value
    return asked


def _choices(endpoint: Endpoint, body: Mapping[str, object]) -> int | BadRequest:
    n = body.get("n", 1)
    n = 1 if n is None else n
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= MAX_CHOICES:
        return BadRequest(f"n must be an integer from 1 to {MAX_CHOICES}", "n")
    best_of = body.get("best_of")
    if best_of is None:
        return n
    if endpoint is not Endpoint.COMPLETIONS:
        return BadRequest("best_of is only for /v1/completions", "best_of")
    if not isinstance(best_of, int) or isinstance(best_of, bool) or not n <= best_of <= MAX_BEST_OF:
        return BadRequest(f"best_of must be an integer from n to {MAX_BEST_OF}", "best_of")
    return best_of


def _check_input(endpoint: Endpoint, body: Mapping[str, object]) -> BadRequest | None:
    if endpoint is Endpoint.CHAT:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return BadRequest("messages must be a non-empty list", "messages")
        if not all(isinstance(m, Mapping) for m in messages):
            return BadRequest("each message must be an object", "messages")
        return None
    field = "prompt" if endpoint is Endpoint.COMPLETIONS else "input"
    if input_tokens(body.get(field)) is None:
        return BadRequest(
            f"{field} must be a string, a token-id array, or a non-empty list of either", field
        )
    return None
