"""What the gateway needs to know of an OpenAI request body before it forwards it: the model, whether
it streams, and how many tokens to reserve (an upper bound on what the server reads and generates:
tokens.py). Checks what the gateway relies on, and refuses fields it does not forward
(request_fields.py); the model server checks the rest. A bad body gives a `BadRequest` naming the
field, never an exception."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from gpuplex.core.serve.endpoints import ENDPOINT_PATHS, Endpoint
from gpuplex.core.serve.request_fields import bad_role, kept_fields, refused_field
from gpuplex.core.serve.tokens import (
    DEFAULT_OVERHEAD,
    PromptOverhead,
    UnknownContent,
    chat_prompt_tokens,
    completion_prompt_tokens,
    input_tokens,
    prompt_count,
)

__all__ = ["ENDPOINT_PATHS", "BadRequest", "Endpoint", "InferenceRequest", "read_request"]


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
    prompt_tokens: int  # the most the server can read (tokens.py)
    max_tokens: int  # what each choice may generate: the one value forwarded (0 for embeddings)
    choices: int = 1  # sequences the server generates per prompt: max(n, best_of)
    prompts: int = 1  # prompts the server runs one by one (a completion's list of prompts)
    wants_usage: bool = False  # a stream whose client asked for the usage chunk

    @property
    def completion_budget(self) -> int:
        return self.max_tokens * self.choices * self.prompts

    @property
    def reserved_tokens(self) -> int:
        return self.prompt_tokens + self.completion_budget


@dataclass(frozen=True, slots=True)
class BadRequest:
    message: str
    param: str | None = None
    unsupported: bool = False  # a field the gateway does not forward


def read_request(
    endpoint: Endpoint,
    body: object,
    default_max_tokens: int,
    token_cap: int | None = None,
    overhead: PromptOverhead = DEFAULT_OVERHEAD,
) -> InferenceRequest | BadRequest:
    """The facts of a request body, with its completion budget decided once: the first of
    LIMIT_FIELDS it sets, else `default_max_tokens` lowered so that prompt + budget fits
    `token_cap` (the smallest tokens-per-minute limit the caller is under, if any)."""
    if not isinstance(body, Mapping):
        return BadRequest("the request body must be a JSON object")
    refused = refused_field(endpoint, body)
    if refused is not None:
        return BadRequest(
            f"{refused} is not accepted here: the gateway forwards only the fields it can count "
            "and that cannot reach other tenants",
            refused,
            unsupported=True,
        )
    model = body.get("model")
    if not isinstance(model, str) or not model:
        return BadRequest("model must be a non-empty string", "model")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        return BadRequest("stream must be true or false", "stream")
    wants_usage = _wants_usage(body)
    if isinstance(wants_usage, BadRequest):
        return wants_usage
    problem = _check_input(endpoint, body)
    if problem is not None:
        return problem
    if endpoint is Endpoint.CHAT:
        role = bad_role(body)
        if role is not None:
            return BadRequest(
                "role must be one of assistant, developer, function, system, tool, user", role
            )
        try:
            prompt = chat_prompt_tokens(body, overhead)
        except UnknownContent as error:
            return BadRequest(f"messages: {error}", "messages")
    else:
        field = "prompt" if endpoint is Endpoint.COMPLETIONS else "input"
        prompt = completion_prompt_tokens(body, field, overhead)
    if endpoint is Endpoint.EMBEDDINGS:
        return InferenceRequest(endpoint, model, stream, prompt, 0)
    choices = _choices(endpoint, body)
    if isinstance(choices, BadRequest):
        return choices
    prompts = prompt_count(body.get("prompt")) if endpoint is Endpoint.COMPLETIONS else 1
    asked = _asked_max_tokens(body)
    if isinstance(asked, BadRequest):
        return asked
    if asked is None:
        asked = default_max_tokens
        if token_cap is not None:
            asked = max(1, min(asked, (token_cap - prompt) // (choices * prompts)))
    return InferenceRequest(
        endpoint, model, stream, prompt, asked, choices, prompts, stream and wants_usage
    )


def forwarded_body(
    body: Mapping[str, object], request: InferenceRequest, upstream_model: str
) -> dict[str, object]:
    """The body to send the model server: the fields it forwards (request_fields.py), the
    server's name for the model, and the completion budget in every field a server might read
    (chat: both LIMIT_FIELDS; completions: `max_tokens`, the only one there), so no server can
    generate more than was reserved, whichever field it prefers. A stream always asks the server
    for its usage (the gateway hides that chunk from a client that did not ask), so every stream
    is billed and limited by the server's own count."""
    forwarded = kept_fields(request.endpoint, body)
    forwarded["model"] = upstream_model
    budget = request.max_tokens
    if request.endpoint is Endpoint.CHAT:
        forwarded.update(dict.fromkeys(LIMIT_FIELDS, budget))
    elif request.endpoint is Endpoint.COMPLETIONS:
        forwarded["max_tokens"] = budget
        forwarded.pop("max_completion_tokens", None)
    forwarded.pop("stream_options", None)
    if request.stream:
        forwarded["stream_options"] = {"include_usage": True}
    return forwarded


def _wants_usage(body: Mapping[str, object]) -> bool | BadRequest:
    options = body.get("stream_options")
    if options is None:
        return False
    if not isinstance(options, Mapping):
        return BadRequest("stream_options must be an object", "stream_options")
    include = options.get("include_usage")
    if include is not None and not isinstance(include, bool):
        return BadRequest("include_usage must be true or false", "stream_options.include_usage")
    return include is True


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
