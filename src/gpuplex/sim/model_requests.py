"""What the simulated model server accepts: an OpenAI request body checked and reduced to the few
facts a reply needs (model, token counts, streaming), or an OpenAI-style error saying what is wrong.
Pure: the server parses the JSON and passes the body in."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from enum import StrEnum

import orjson

from gpuplex.core.serve.inference import Endpoint
from gpuplex.core.serve.tokens import UnknownContent, is_token_array, text_tokens
from gpuplex.core.serve.tokens import chat_prompt_tokens as prompt_tokens

#: Limits that keep one request from costing the server gigabytes (vLLM's max_model_len does the
#: same for completions).
MAX_COMPLETION_TOKENS = 1_000_000
MAX_DIMENSIONS = 65_536
MAX_CHOICES = 128


class FinishReason(StrEnum):
    LENGTH = "length"  # stopped at the request's max_tokens
    STOP = "stop"  # the request set no limit: the model "chose" to stop at the server's default


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """A valid request, reduced to what the reply depends on."""

    endpoint: Endpoint
    model: str
    prompt_tokens: int
    completion_tokens: int  # per sequence; 0 for embeddings
    finish_reason: FinishReason
    stream: bool = False
    include_usage: bool = False
    choices: int = 1  # `n`: choices in the reply, each `completion_tokens` long
    sequences: int = 1  # generated: `best_of` for completions, else `n`
    inputs: tuple[str, ...] = ()  # embeddings: one text (or token array as JSON) per vector
    dimensions: int = 0  # embeddings: length of each vector
    base64: bool = False  # embeddings: vectors as base64 float32, as the openai client asks

    @property
    def generated_tokens(self) -> int:
        """What the whole request generates: every sequence, returned or not."""
        return self.completion_tokens * self.sequences


@dataclass(frozen=True, slots=True)
class ErrorReply:
    """An OpenAI-style error: HTTP status and the `{"error": {...}}` body."""

    status: int
    message: str
    code: str
    param: str | None = None

    @property
    def type(self) -> str:
        return "invalid_request_error" if self.status < 500 else "server_error"

    def body(self) -> bytes:
        error = {"message": self.message, "type": self.type, "param": self.param, "code": self.code}
        return orjson.dumps({"error": error})


def invalid_json() -> ErrorReply:
    return ErrorReply(
        400, "The request body is not valid JSON: send a JSON object.", "invalid_json"
    )


def bad(message: str, param: str | None = None) -> ErrorReply:
    return ErrorReply(400, message, "invalid_request", param)


def unknown_model(model: str) -> ErrorReply:
    return ErrorReply(404, f"The model `{model}` does not exist.", "model_not_found", "model")


def parse_request(
    endpoint: Endpoint,
    body: object,
    served: Collection[str],
    default_max_tokens: int,
    embedding_dim: int,
    max_model_len: int = 4096,
) -> GenerationRequest | ErrorReply:
    """Check an OpenAI request body for `endpoint` against the models this server serves.

    The completion length follows vLLM's OpenAI server: a chat request generates
    `max_completion_tokens or max_tokens`, else up to the context left (`max_model_len` - prompt);
    a completion request reads only `max_tokens` (default `default_max_tokens`, vLLM's 16).
    `n` choices (and `best_of` sequences for completions) each generate that many."""
    if not isinstance(body, dict):
        return bad("The request body must be a JSON object.")
    model = body.get("model")
    if not isinstance(model, str):
        return bad("`model` is required and must be a string.", "model")
    if model not in served:
        return unknown_model(model)
    if endpoint is Endpoint.EMBEDDINGS:
        return _embedding(body, model, embedding_dim)
    if endpoint is Endpoint.CHAT:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return bad("`messages` is required and must be a non-empty list.", "messages")
        if not all(isinstance(m, dict) for m in messages):
            return bad("Each item of `messages` must be an object.", "messages")
        try:
            n_prompt = prompt_tokens(body)
        except UnknownContent as error:
            return bad(f"`messages`: {error}.", "messages")
    else:
        counted = _input_tokens(body.get("prompt"))
        if counted is None:
            return bad(
                "`prompt` is required: a string, a list of strings or of token ids.", "prompt"
            )
        n_prompt = counted[0]
    default = default_max_tokens
    if endpoint is Endpoint.CHAT:
        default = max(1, max_model_len - n_prompt)
    return _generation(endpoint, body, model, n_prompt, default)


def _generation(
    endpoint: Endpoint,
    body: dict[str, object],
    model: str,
    n_prompt: int,
    default_max_tokens: int,
) -> GenerationRequest | ErrorReply:
    limit: int | None = None
    fields = (
        ("max_completion_tokens", "max_tokens") if endpoint is Endpoint.CHAT else ("max_tokens",)
    )
    for field in fields:
        value = body.get(field)
        if value is None:
            continue
        limit = _positive_int(value)
        if limit is None or limit > MAX_COMPLETION_TOKENS:
            return bad(
                f"`{field}` must be a positive integer, at most {MAX_COMPLETION_TOKENS}.", field
            )
        break
    choices = _choices(endpoint, body)
    if isinstance(choices, ErrorReply):
        return choices
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        return bad("`stream` must be true or false.", "stream")
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        return bad("`stream_options` must be an object.", "stream_options")
    include_usage = bool(options.get("include_usage")) if options else False
    return GenerationRequest(
        endpoint=endpoint,
        model=model,
        prompt_tokens=n_prompt,
        completion_tokens=limit if limit is not None else default_max_tokens,
        finish_reason=FinishReason.STOP if limit is None else FinishReason.LENGTH,
        stream=bool(stream),
        include_usage=include_usage,
        choices=choices[0],
        sequences=choices[1],
    )


def _choices(endpoint: Endpoint, body: dict[str, object]) -> tuple[int, int] | ErrorReply:
    """(choices returned, sequences generated): `n`, and `best_of` (completions, >= n)."""
    n = 1 if body.get("n") is None else _positive_int(body.get("n"))
    if n is None or n > MAX_CHOICES:
        return bad(f"`n` must be a positive integer, at most {MAX_CHOICES}.", "n")
    best_of = body.get("best_of")
    if best_of is None or endpoint is not Endpoint.COMPLETIONS:
        return n, n
    sequences = _positive_int(best_of)
    if sequences is None or not n <= sequences <= MAX_CHOICES:
        return bad("`best_of` must be an integer, at least `n`.", "best_of")
    return n, sequences


def _embedding(
    body: dict[str, object], model: str, embedding_dim: int
) -> GenerationRequest | ErrorReply:
    counted = _input_tokens(body.get("input"))
    if counted is None:
        return bad("`input` is required: a string, a list of strings or of token ids.", "input")
    asked = body.get("dimensions")
    dimensions = embedding_dim if asked is None else _positive_int(asked)
    if dimensions is None or dimensions > MAX_DIMENSIONS:
        return bad(
            f"`dimensions` must be a positive integer, at most {MAX_DIMENSIONS}.", "dimensions"
        )
    encoding = body.get("encoding_format")
    if encoding not in (None, "float", "base64"):
        return bad("`encoding_format` must be `float` or `base64`.", "encoding_format")
    n_prompt, inputs = counted
    return GenerationRequest(
        endpoint=Endpoint.EMBEDDINGS,
        model=model,
        prompt_tokens=n_prompt,
        completion_tokens=0,
        finish_reason=FinishReason.STOP,
        inputs=inputs,
        dimensions=dimensions,
        base64=encoding == "base64",
    )


def _input_tokens(value: object) -> tuple[int, tuple[str, ...]] | None:
    """(tokens, one text per item) of a `prompt` or `input`: a string, a list of strings, a token
    array, or a list of token arrays. None when it is none of those, or empty."""
    if isinstance(value, str):
        return (text_tokens(value), (value,)) if value else None
    if not isinstance(value, list) or not value:
        return None
    if all(isinstance(v, str) for v in value):
        return sum(text_tokens(v) for v in value), tuple(value)
    if is_token_array(value):
        return len(value), (orjson.dumps(value).decode(),)
    if all(isinstance(v, list) and v and is_token_array(v) for v in value):
        return sum(len(v) for v in value), tuple(orjson.dumps(v).decode() for v in value)
    return None


def _positive_int(value: object) -> int | None:
    """`value` if it is a positive integer (JSON true is not one), else None."""
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None
